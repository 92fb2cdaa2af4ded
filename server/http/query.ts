// The one query-string reader of the engine and the gateway, so that both read a request's
// parameters the same way: '&'-separated name=value pairs, '+' as a space, percent-encoding
// that must decode to UTF-8, each name at most once, at most MAX_QUERY_PARAMS of them. Anything
// else is a 400 with one sentence. The result has no prototype: a parameter named
// "constructor" or "__proto__" is an ordinary (unknown) name.
import { ValidationError } from "../../lib/errors.js";

/** Parameters one query string may have (the octet-stream put, the widest, takes 7). */
export const MAX_QUERY_PARAMS = 32;

function decode(s: string): string {
  try {
    return decodeURIComponent(s.replace(/\+/g, " "));
  } catch {
    throw new ValidationError("The query string is not valid percent-encoded UTF-8.", "query");
  }
}

/**
 * Reads a query string (the part after '?', without it) into a prototype-less object of names
 * to values. Empty pieces (`a=1&&b=2`, a trailing '&') are skipped; a name without '=' has the
 * value "".
 * @example parseQueryString("namespace=default&key=a%2Fb") // { namespace: "default", key: "a/b" }
 */
export function parseQueryString(raw: string | null | undefined): Record<string, string> {
  const out = Object.create(null) as Record<string, string>;
  if (!raw) return out;
  let count = 0;
  for (const piece of raw.split("&")) {
    if (piece === "") continue;
    if (++count > MAX_QUERY_PARAMS) throw new ValidationError(`The query string has more than ${MAX_QUERY_PARAMS} parameters.`, "query");
    const eq = piece.indexOf("=");
    const name = decode(eq < 0 ? piece : piece.slice(0, eq));
    const value = eq < 0 ? "" : decode(piece.slice(eq + 1));
    if (name === "") throw new ValidationError("The query string has a parameter without a name.", "query");
    if (Object.prototype.hasOwnProperty.call(out, name))
      throw new ValidationError(`${name.length > 64 ? `${name.slice(0, 64)}...` : name} must be given once in the query string.`, name.slice(0, 64));
    out[name] = value;
  }
  return out;
}

/**
 * The query string of a request target (`/path?query#fragment`), parsed.
 * @example queryOf("/v1/list/default?limit=10") // { limit: "10" }
 */
export function queryOf(url: string): Record<string, string> {
  const q = url.indexOf("?");
  if (q < 0) return Object.create(null) as Record<string, string>;
  const hash = url.indexOf("#", q);
  return parseQueryString(url.slice(q + 1, hash < 0 ? undefined : hash));
}
