// CORS from SVC_GATE_CORS_ORIGINS (off when unset). Browsers may read the X-SVC-*,
// X-RateLimit-* and X-Request-Id headers; preflights are answered before authentication.
import type { IncomingMessage, ServerResponse } from "node:http";
import { headerOf } from "./auth.js";

export const EXPOSED_HEADERS = [
  "X-Request-Id",
  "X-SVC-CUs",
  "X-SVC-Dtype",
  "X-SVC-Shape",
  "X-SVC-Version",
  "X-RateLimit-Limit",
  "X-RateLimit-Remaining",
  "X-RateLimit-Reset",
  "Retry-After",
  "Idempotent-Replayed",
].join(", ");
const ALLOWED_HEADERS = "X-Api-Key, Authorization, Content-Type, Accept, X-Request-Id, X-SVC-Metadata, Idempotency-Key";
const ALLOWED_METHODS = "GET, POST, DELETE, OPTIONS";

/** CORS handling on plain Node requests (so the data plane's fast path can use it too). */
export function corsMiddleware(origins: readonly string[]): (req: IncomingMessage, res: ServerResponse, next: () => void) => void {
  const any = origins.includes("*");
  const set = new Set(origins);
  return (req, res, next) => {
    if (origins.length === 0) return next();
    const origin = headerOf(req, "origin");
    const vary = res.getHeader("Vary");
    if (!vary) res.setHeader("Vary", "Origin");
    else if (!/\borigin\b/i.test(String(vary))) res.setHeader("Vary", `${String(vary)}, Origin`);
    const allowed = origin !== undefined && (any || set.has(origin));
    if (allowed) {
      res.setHeader("Access-Control-Allow-Origin", any ? "*" : origin);
      res.setHeader("Access-Control-Expose-Headers", EXPOSED_HEADERS);
    }
    if (req.method === "OPTIONS" && headerOf(req, "access-control-request-method")) {
      if (allowed) {
        res.setHeader("Access-Control-Allow-Methods", ALLOWED_METHODS);
        res.setHeader("Access-Control-Allow-Headers", ALLOWED_HEADERS);
        res.setHeader("Access-Control-Max-Age", "600");
      }
      res.statusCode = 204;
      res.end();
      return;
    }
    next();
  };
}
