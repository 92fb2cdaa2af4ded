// createClient: the store's methods over HTTP through the gateway (docs/api.md (data plane)),
// so that code moves from embedded to hosted by changing one line. Large payloads travel
// as application/octet-stream both ways; errors come back as the library's error classes
// carrying the server's code, detail and request_id; 429, 502 and a 503 with Retry-After (a
// dependency down, the server overloaded; never the monthly quota) are retried with
// exponential backoff that honours Retry-After; every write carries an Idempotency-Key, the
// same on its retries, so a retried write is applied at most once. The client itself is in
// lib/client-core.ts (which the CLI uses directly); this checks the options first.
import { clientCore, type ClientOptions, type SvcClient } from "./client-core.js";
import { clientOptionsSchema, parseOrThrow } from "./client-validate.js";

export * from "./client-core.js";

/**
 * Creates a client of the hosted service with the same methods, options, results and
 * error classes as a store from `createStore`.
 *
 * @example
 *   const store = createClient({ baseUrl: "http://127.0.0.1:8080", apiKey: process.env.SVC_API_KEY! });
 *   await store.put("default", "field/t0", data, { shape: [128, 128, 128], dtype: "float32" });
 *   console.log(store.lastResponse?.cus);
 */
export function createClient(options: ClientOptions): SvcClient {
  parseOrThrow(clientOptionsSchema, options, "options");
  return clientCore(options);
}
