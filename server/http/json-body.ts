// The JSON body parser of the servers: reads an application/json body up to a byte limit and
// parses it with parseStrictJson, so every JSON body is read the same way (duplicate member
// names, "__proto__" and invalid UTF-8 refused with 400).
import express, { type RequestHandler } from "express";
import { UnsupportedMediaTypeError } from "../../lib/errors.js";
import { parseStrictJson } from "./json.js";

/**
 * Express middleware: for application/json requests, `req.body` becomes the parsed value
 * (undefined when the body is empty). A charset other than UTF-8 is refused with 415.
 * @example app.use(strictJsonBody({ limit: 1024 * 1024 }));
 */
export function strictJsonBody({ limit }: { limit: number }): RequestHandler {
  const raw = express.raw({ limit, type: "application/json", inflate: true });
  return (req, res, next) => {
    if (!req.is("application/json")) return next();
    const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(req.get("content-type") ?? "")?.[1]?.toLowerCase();
    if (charset !== undefined && charset !== "utf-8" && charset !== "utf8")
      return next(new UnsupportedMediaTypeError("JSON bodies must be UTF-8."));
    raw(req, res, (err?: unknown) => {
      if (err) return next(err);
      try {
        const buf = req.body as unknown;
        req.body = Buffer.isBuffer(buf) && buf.byteLength > 0 ? parseStrictJson(buf) : undefined;
        next();
      } catch (e) {
        next(e);
      }
    });
  };
}
