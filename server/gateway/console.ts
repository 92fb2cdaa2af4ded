// The web console: static files built by `npm run build` into dist/console, served at /console
// on the API's origin. Every console response carries a strict Content-Security-Policy (scripts,
// styles, images and API calls from this origin only; no inline script, no framing), and a
// browser asking for / is sent to the console.
import express, { type Router } from "express";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { NotFoundError } from "../../lib/errors.js";
import { pathInSentence } from "../http/errors.js";
import { packageRoot } from "../../lib/native.js";

export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data: blob:",
  "connect-src 'self'",
  "font-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join("; ");

/** Where the built console lives: dist/console under the package root. */
export function consoleDir(): string {
  return join(packageRoot(), "dist", "console");
}

const securityHeaders = (res: express.Response): void => {
  res.setHeader("Content-Security-Policy", CONSOLE_CSP);
  res.setHeader("X-Content-Type-Options", "nosniff");
  res.setHeader("Referrer-Policy", "no-referrer");
  res.setHeader("X-Frame-Options", "DENY");
  res.setHeader("Cross-Origin-Opener-Policy", "same-origin");
  res.setHeader("Cache-Control", "no-cache");
};

export function consoleRouter(dir = consoleDir()): Router {
  const r = express.Router();
  r.get("/", (req, res, next) => {
    // A browser (it asks for HTML) gets the console; API clients keep the JSON 404.
    if (/\btext\/html\b/i.test(req.get("accept") ?? "")) return void res.redirect(302, "/console/");
    next();
  });
  // Only the bare path: express matches "/console/" here too (non-strict routing).
  r.get("/console", (req, res, next) => (req.path === "/console" ? res.redirect(301, "/console/") : next()));
  const files = express.static(dir, {
    index: "index.html",
    dotfiles: "ignore",
    fallthrough: true,
    redirect: false,
    setHeaders: (res) => securityHeaders(res as express.Response),
  });
  r.use("/console", (req, res, next) => {
    securityHeaders(res);
    if (req.method !== "GET" && req.method !== "HEAD") return next(new NotFoundError(`No endpoint ${req.method} ${pathInSentence(`/console${req.path}`)}.`));
    files(req, res, () => {
      if (!existsSync(join(dir, "index.html"))) return next(new NotFoundError("The console is not built; run `npm run build`."));
      next(new NotFoundError(`No console file ${pathInSentence(req.path)}.`));
    });
  });
  return r;
}
