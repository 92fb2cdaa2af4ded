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

/** The body limit of a request with content type `isOctetStream` (raw payload) or anything else (JSON). */
export function bodyLimit(maxUploadBytes: number, isOctetStream: boolean): number {
  return isOctetStream ? maxUploadBytes : jsonBodyLimit(maxUploadBytes);
}
