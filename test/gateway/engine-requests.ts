// What the engine-client tests send and how they wait for a failure.
import type { ForwardRequest } from "../../server/gateway/proxy.js";

/** A GET of one entry as the data plane forwards it; `extra` replaces any field. */
export const ask = (extra: Partial<ForwardRequest> = {}): ForwardRequest => ({
  method: "GET",
  path: "/v1/get/ns/k",
  headers: { accept: "application/json" },
  body: null,
  tenantId: "acme",
  requestId: "0b5a6f3e-6f0d-4c41-9f55-1f0f2d9c4a11",
  ...extra,
});

/** What `p` was rejected with, or null when it was fulfilled. */
export const failure = (p: Promise<unknown>): Promise<unknown> =>
  p.then(
    () => null,
    (e: unknown) => e,
  );
