// Worker thread of server/http/offload.ts: the work on large request and response bodies that
// would otherwise hold a server's event loop for a time proportional to their size (parsing
// and checking JSON, decoding and encoding base64, hashing).
import { parentPort } from "node:worker_threads";
import { SvcError } from "../../lib/errors.js";
import { lowerThreadPriority } from "../../lib/worker-code.js";
import { toSvcError } from "./errors.js";
import { prepareEngineJson, prepareGatewayJson, requestHash } from "./body-prepare.js";
import type { Operation } from "./operations.js";
import type { OffloadJob, OffloadReply } from "./offload.js";

const port = parentPort!;

// parsing one tenant's large body must not take the CPU from the loops that answer everyone else
lowerThreadPriority();

/** The ArrayBuffers of the typed arrays in `value` that own all of their memory: moved to the other thread rather than copied. */
function transferables(value: unknown, out: Set<ArrayBuffer>, depth = 0): void {
  if (depth > 16 || value === null || typeof value !== "object") return;
  if (ArrayBuffer.isView(value)) {
    const b = value.buffer;
    if (b instanceof ArrayBuffer && value.byteOffset === 0 && value.byteLength === b.byteLength) out.add(b);
    return;
  }
  if (Array.isArray(value)) for (const v of value) transferables(v, out, depth + 1);
  else for (const v of Object.values(value)) transferables(v, out, depth + 1);
}

function run(job: OffloadJob): { value?: unknown; hash?: string } {
  switch (job.op) {
    case "engine-json":
      return { value: prepareEngineJson(job.path!, job.bytes), hash: job.prefix === undefined ? undefined : requestHash(job.prefix, job.bytes) };
    case "gateway-json":
      return { value: prepareGatewayJson(job.path as Operation, job.bytes) };
    case "hash":
      return { hash: requestHash(job.prefix ?? "", job.bytes) };
    case "base64": {
      const b = job.bytes;
      const text = Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("base64");
      const ascii = Buffer.allocUnsafeSlow(text.length);
      ascii.write(text, "latin1");
      return { value: new Uint8Array(ascii.buffer, 0, text.length) };
    }
  }
}

port.on("message", (job: OffloadJob) => {
  let reply: OffloadReply;
  const transfer = new Set<ArrayBuffer>();
  try {
    const r = run(job);
    reply = { id: job.id, ok: true, value: r.value, hash: r.hash, bytes: job.giveBack ? job.bytes : undefined };
    transferables(r.value, transfer);
    if (job.giveBack) transferables(job.bytes, transfer);
  } catch (e) {
    // the same error the route would have thrown on the event loop; anything unexpected is internal
    const err: SvcError = toSvcError(e);
    reply = { id: job.id, ok: false, error: { code: err.code, message: err.message, extra: err.extra } };
    if (job.giveBack) {
      reply.bytes = job.bytes;
      transferables(job.bytes, transfer);
    }
  }
  port.postMessage(reply, [...transfer]);
});
port.postMessage({ ready: true });
