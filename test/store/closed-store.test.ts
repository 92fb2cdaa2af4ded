// Operations on a closed store (memory, LMDB, PostgreSQL), and those in flight when it closes, reject with
// StoreUnavailableError (store_unavailable, HTTP 503 with Retry-After): the request was not
// carried out, or not known to be, and may be sent again; nothing about it was bad.
import test from "tape";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createStore } from "../../lib/store/index.js";
import { STATUS_OF, StoreUnavailableError } from "../../lib/errors.js";
import { retryAfterOf, toSvcError } from "../../server/http/errors.js";
import { freshStoreUrl } from "./pg-db.js";

const shape = [512, 512];
const data = () => Float32Array.from({ length: 512 * 512 }, (_, i) => Math.sin(i / 100));

for (const kind of ["memory", "lmdb", "postgres"] as const) {
  test(`${kind}: a closed store answers store_unavailable, in flight and after`, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), "closed-store-"));
    const s = await createStore(kind === "postgres" ? { url: await freshStoreUrl() } : { path: kind === "memory" ? ":memory:" : dir });
    const closedError = (what: string, e: unknown) => {
      t.ok(e instanceof StoreUnavailableError, `${what}: StoreUnavailableError (${(e as Error).constructor.name}: ${(e as Error).message})`);
      const err = toSvcError(e);
      t.equal(err.code, "store_unavailable", `${what}: code store_unavailable`);
      t.equal(err.message, "The store is closed.", `${what}: the sentence`);
      t.equal(STATUS_OF[err.code], 503, `${what}: HTTP 503`);
      t.ok((retryAfterOf(err) ?? 0) > 0, `${what}: with Retry-After`);
    };
    try {
      await s.put("ns", "a", data(), { shape });
      await s.put("ns", "t", data(), { shape, codec: "tt" });
      // each put compresses off the event loop before it writes: close() comes first
      const writes = [
        s.put("ns", "k", data(), { shape }),
        s.put("ns", "k2", data(), { shape, codec: "tt" }),
        s.put("ns", "k3", data(), { shape, codec: "lossless" }),
      ];
      // reads may finish before the close or be cut by it; either way never a bad request
      const reads = [
        s.get("ns", "a"),
        s.serve("ns", "t"),
        s.query.similarity("ns", "a", "t"),
        s.query.topk("ns", { key: "a" }),
        s.list("ns"),
        s.search("ns", {}),
      ];
      const closing = s.close();
      const [wrote, read] = await Promise.all([Promise.allSettled(writes), Promise.allSettled(reads)]);
      for (const [i, r] of wrote.entries()) {
        if (r.status === "fulfilled") t.fail(`in-flight put ${i}: stored after close() was called`);
        else closedError(`in-flight put ${i}`, r.reason);
      }
      for (const [i, r] of read.entries()) {
        if (r.status === "fulfilled") t.pass(`in-flight read ${i}: answered`);
        else closedError(`in-flight read ${i}`, r.reason);
      }
      await closing;
      const after: [string, () => Promise<unknown>][] = [
        ["put", () => s.put("ns", "z", data(), { shape })],
        ["get", () => s.get("ns", "a")],
        ["serve", () => s.serve("ns", "a")],
        ["delete", () => s.delete("ns", "a")],
        ["list", () => s.list("ns")],
        ["similarity", () => s.query.similarity("ns", "a", "a")],
        ["compact", () => s.compact()],
      ];
      for (const [what, op] of after) {
        try {
          await op();
          t.fail(`${what} after close: answered`);
        } catch (e) {
          closedError(`${what} after close`, e);
        }
      }
    } finally {
      await s.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
