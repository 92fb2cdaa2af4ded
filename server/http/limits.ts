// Size limits the engine and the gateway must agree on: a request one of them accepts is not
// refused by the other for its size alone.

/** Request header bytes a server accepts: X-SVC-Metadata may carry up to 64 KiB (docs/api.md (names and data types)). */
export const MAX_HEADER_BYTES = 96 * 1024;

/** Field names, metadata and other JSON around the base64 payload of a JSON body. */
export const JSON_SLACK_BYTES = 1024 * 1024;

/**
 * The largest JSON request body for an upload limit on the decoded payload
 * (SVC_ENGINE_MAX_UPLOAD_BYTES): the payload's base64 text plus JSON_SLACK_BYTES. The decoded
 * payload itself is checked against `maxUploadBytes` by the engine once it is decoded.
 * @example jsonBodyLimit(3) === 4 + 1024 * 1024
 */
export function jsonBodyLimit(maxUploadBytes: number): number {
  return Math.ceil((maxUploadBytes * 4) / 3) + JSON_SLACK_BYTES;
}

/**
 * The body limit of a request with content type `isOctetStream` (raw payload) or anything else
 * (JSON); with `path`, JSON bodies of routes that carry no payload get SMALL_JSON_BODY_BYTES.
 */
export function bodyLimit(maxUploadBytes: number, isOctetStream: boolean, path?: string): number {
  if (isOctetStream) return maxUploadBytes;
  return path === undefined ? jsonBodyLimit(maxUploadBytes) : jsonBodyLimitFor(path, maxUploadBytes);
}

/** Routes whose JSON bodies carry payloads (base64) and may reach jsonBodyLimit(). */
export const PAYLOAD_JSON_ROUTES: ReadonlySet<string> = new Set(["/v1/put", "/v1/put_cores", "/v1/put_cores_batch", "/v1/query/vector"]);

/**
 * The largest JSON body of every other route (search, serve, similarity, top-K): their fields
 * and a filter of at most 64 KiB fit many times over, and reading and parsing such a body stays short.
 */
export const SMALL_JSON_BODY_BYTES = 1024 * 1024;

/**
 * The JSON body limit of the route at `path` (no query string).
 * @example jsonBodyLimitFor("/v1/search", 100 * 2 ** 20) === 1024 * 1024
 */
export function jsonBodyLimitFor(path: string, maxUploadBytes: number): number {
  return PAYLOAD_JSON_ROUTES.has(path) ? jsonBodyLimit(maxUploadBytes) : Math.min(SMALL_JSON_BODY_BYTES, jsonBodyLimit(maxUploadBytes));
}

/**
 * What a refusal by size names: the upload limit and its variable, or, for the JSON body of a
 * route that carries no payload (`path` given), the limit of that body.
 * @example limitText(1024 * 1024, "/v1/search") === "the limit of 1048576 bytes for this request's JSON body"
 */
export function limitText(limit: number, path?: string): string {
  return path !== undefined && !PAYLOAD_JSON_ROUTES.has(path)
    ? `the limit of ${limit} bytes for this request's JSON body`
    : `the upload limit of ${limit} bytes (SVC_ENGINE_MAX_UPLOAD_BYTES)`;
}
