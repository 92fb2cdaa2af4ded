// The store's method-level tests are written once against StoreApi and run on several
// targets: createStore on memory, on LMDB and on PostgreSQL (a schema of its own per store in
// a database of the test process, test/store/pg-db.ts), and createClient over a real gateway and engine
// (LMDB, HTTP on ephemeral ports, one gateway + engine per test file, a fresh tenant per
// test). Each shared test asserts the same expected values on every target; besides, every
// call it makes is recorded (its result or its error, normalised) and a last test checks that
// every target recorded exactly the outcomes of the first one: the same fields and values,
// numbers equal to the bit, typed arrays of the same class with the same bytes, the same error
// classes, codes and messages. Only the wall-clock instants (created_at, updated_at,
// purge_after) are masked. Tests that exist only in-process are registered with storeOnly,
// which says why, and run on the store targets alone.
import test from "tape";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { request } from "undici";
import { createStore, type Store, type StoreOptions } from "../../lib/store/index.js";
import { createClient, type SvcClient } from "../../lib/client.js";
import { SvcError } from "../../lib/errors.js";
import type { TensorStore } from "../../lib/tensor-store.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine } from "../../server/engine/server.js";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { startGateway } from "../../server/gateway/server.js";
import { freshStoreUrl } from "./pg-db.js";

export type Kind = "memory" | "lmdb" | "postgres" | "http";
/** The in-process targets: a store from createStore on each backend. */
export type StoreKind = Exclude<Kind, "http">;
/** Every backend, for suites that run the store tests on each. */
export const STORE_KINDS: StoreKind[] = ["memory", "lmdb", "postgres"];

/**
 * The methods a store from createStore and a client from createClient share: the public
 * TensorStore (lib/tensor-store.ts) less close(), which each target's clean-up calls itself.
 */
export type StoreApi = Omit<TensorStore, "close">;

export interface Ctx {
  kind: Kind;
  /** Another tenant's view with the same namespaces: forTenant in-process, another tenant's API key over HTTP. */
  tenant(id: string): Promise<StoreApi>;
  /**
   * Calls started synchronously inside `f` are not recorded for the parity check: for
   * concurrent calls, whose outcomes depend on the order they reach the store in.
   */
  untraced<T>(f: () => T): T;
}

type Body = (t: test.Test, s: StoreApi, ctx: Ctx) => Promise<void>;
export interface StoreOnlyCtx {
  kind: StoreKind;
  /** A new store of this kind (LMDB: in a new temporary directory; PostgreSQL: in a new schema). */
  open(opts?: Omit<StoreOptions, "path" | "url">): Promise<Store>;
  /** A new temporary directory, removed when the file's tests end. */
  dir(): string;
}
type StoreOnlyBody = (t: test.Test, ctx: StoreOnlyCtx) => Promise<void>;

interface Outcome {
  call: string;
  out: unknown;
}

const INSTANT_FIELDS = new Set(["created_at", "updated_at", "purge_after"]);

/**
 * Plain, comparable form of a result or an error (typed arrays as class, length and SHA-256
 * of their bytes; methods left out), compared as JSON text: numbers to the bit.
 */
export function normalise(v: unknown): unknown {
  if (v instanceof SvcError) return { error: v.name, code: v.code, message: v.message };
  if (v instanceof Error) return { error: v.name, message: v.message };
  if (ArrayBuffer.isView(v)) {
    const bytes = Buffer.from(v.buffer, v.byteOffset, v.byteLength);
    return { array: v.constructor.name, length: (v as unknown as ArrayLike<unknown>).length, sha256: createHash("sha256").update(bytes).digest("hex") };
  }
  if (Array.isArray(v)) return v.map(normalise);
  // JSON would lose these: spelt out so that a difference shows
  if (typeof v === "number" && (Object.is(v, -0) || !Number.isFinite(v))) return Object.is(v, -0) ? "-0" : String(v);
  if (v === undefined) return "<undefined>";
  if (typeof v === "bigint") return `${v}n`;
  if (v && typeof v === "object") {
    const o: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) {
      if (typeof x === "function") continue;
      o[k] = INSTANT_FIELDS.has(k) && typeof x === "string" ? "<instant>" : normalise(x);
    }
    return o;
  }
  return v;
}

/** The recorded view of `api`: each call's outcome is pushed to `trace` in call order. */
function recorded(api: StoreApi, trace: Outcome[], off: { n: number }): StoreApi {
  const wrap =
    <A extends unknown[], R>(name: string, f: (...a: A) => Promise<R>) =>
    (...args: A): Promise<R> => {
      const where = args
        .filter((a) => typeof a === "string")
        .slice(0, 3)
        .join(" ");
      const outcome: Outcome = { call: `${name} ${where}`, out: "<pending>" };
      if (off.n === 0) trace.push(outcome);
      let p: Promise<R>;
      try {
        p = f(...args);
      } catch (e) {
        outcome.out = { thrown_synchronously: normalise(e) }; // every method rejects instead: a difference
        throw e;
      }
      p.then(
        (r) => {
          outcome.out = normalise(r);
        },
        (e) => {
          outcome.out = normalise(e);
        },
      );
      return p;
    };
  return {
    put: wrap("put", api.put.bind(api)),
    putCores: wrap("putCores", api.putCores.bind(api)),
    putPred: wrap("putPred", api.putPred.bind(api)),
    putCoresBatch: wrap("putCoresBatch", api.putCoresBatch.bind(api)),
    get: wrap("get", api.get.bind(api)),
    list: wrap("list", api.list.bind(api)),
    search: wrap("search", api.search.bind(api)),
    delete: wrap("delete", api.delete.bind(api)),
    serve: wrap("serve", api.serve.bind(api)),
    serveGpu: wrap("serveGpu", api.serveGpu.bind(api)),
    query: {
      similarity: wrap("query.similarity", api.query.similarity),
      topk: wrap("query.topk", api.query.topk),
      vector: wrap("query.vector", api.query.vector),
    },
  };
}

/** A real engine (LMDB) and gateway on ephemeral ports, started on first use; tenants are onboarded on demand. */
export class Stack {
  #started: Promise<{ gateway: { url: string; close(): Promise<void> }; engine: { close(): Promise<void> } }> | null = null;
  #n = 0;
  readonly dir = mkdtempSync(join(tmpdir(), "svc-parity-"));
  readonly serviceKey = "p".repeat(64);

  /** `gatewayEnv`: settings of the gateway beside the stack's own (an upload limit, say). */
  constructor(readonly gatewayEnv: Record<string, string> = {}) {}

  #start() {
    return (this.#started ??= (async () => {
      const engine = await startEngine(
        loadEngineConfig({
          SVC_ENGINE_PORT: "0",
          SVC_ENGINE_DATA_DIR: join(this.dir, "engine"),
          SVC_ENGINE_API_KEYS: this.serviceKey,
          SVC_ENGINE_LOG_LEVEL: "silent",
        }),
      );
      const gateway = await startGateway(
        loadGatewayConfig({
          SVC_GATE_HOST: "127.0.0.1",
          SVC_GATE_PORT: "0",
          SVC_GATE_ENGINE_URL: engine.url,
          SVC_GATE_ENGINE_SERVICE_KEY: this.serviceKey,
          SVC_GATE_DATA_DIR: join(this.dir, "gate"),
          SVC_GATE_AUDIT_LOG_PATH: join(this.dir, "audit.jsonl"),
          SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "1000000",
          ...this.gatewayEnv,
        }),
      );
      return { gateway, engine };
    })());
  }

  /** The gateway's base URL. */
  async url(): Promise<string> {
    return (await this.#start()).gateway.url;
  }

  /** A client of a new tenant whose ACL holds `namespaces`. */
  async client(namespaces: string[], id = "t"): Promise<SvcClient> {
    const { gateway } = await this.#start();
    const res = await request(`${gateway.url}/gate/onboard/create`, {
      method: "POST",
      headers: { authorization: `Bearer ${this.serviceKey}`, "content-type": "application/json" },
      body: JSON.stringify({ tenant_id: `${id}-${++this.#n}`, namespaces }),
    });
    const body = (await res.body.json()) as { api_key?: string };
    if (res.statusCode !== 201 || !body.api_key) throw new Error(`onboarding failed: HTTP ${res.statusCode} ${JSON.stringify(body)}`);
    return createClient({ baseUrl: gateway.url, apiKey: body.api_key });
  }

  async close() {
    if (this.#started) {
      const { gateway, engine } = await this.#started;
      await gateway.close();
      await engine.close();
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export interface SuiteOptions {
  /** Where the calls are run; the first is the reference of the parity check. */
  targets: Kind[];
  /** Every namespace a test of the file uses (an HTTP tenant's ACL). */
  namespaces: string[];
}

type Entry = { name: string; shared: true; body: Body } | { name: string; shared: false; why: string; kinds: Kind[]; body: StoreOnlyBody };

/**
 * Collects a test file's tests; `run()` registers them with tape, target by target, then the
 * parity check and the clean-up.
 */
export function storeSuite(o: SuiteOptions) {
  const entries: Entry[] = [];
  const traces = new Map<string, Map<Kind, Outcome[]>>();
  const dirs: string[] = [];
  const stack = o.targets.includes("http") ? new Stack() : null;
  const tmp = () => {
    const d = mkdtempSync(join(tmpdir(), "svc-store-"));
    dirs.push(d);
    return d;
  };
  const openStore = async (kind: StoreKind, opts: Omit<StoreOptions, "path" | "url"> = {}) =>
    kind === "postgres" ? createStore({ ...opts, url: await freshStoreUrl() }) : createStore({ ...opts, path: kind === "memory" ? ":memory:" : tmp() });

  async function runShared(t: test.Test, kind: Kind, e: Extract<Entry, { shared: true }>) {
    const trace: Outcome[] = [];
    const off = { n: 0 };
    const byKind = traces.get(e.name) ?? new Map<Kind, Outcome[]>();
    traces.set(e.name, byKind);
    byKind.set(kind, trace);
    const closers: Array<() => Promise<void>> = [];
    const untraced = <T>(f: () => T): T => {
      off.n++;
      try {
        return f();
      } finally {
        off.n--;
      }
    };
    try {
      let s: StoreApi;
      let tenant: (id: string) => Promise<StoreApi>;
      if (kind === "http") {
        const c = await stack!.client(o.namespaces);
        closers.push(() => c.close());
        s = c;
        tenant = async (id) => {
          const other = await stack!.client(o.namespaces, id);
          closers.push(() => other.close());
          return recorded(other, trace, off);
        };
      } else {
        const store = await openStore(kind);
        closers.push(() => store.close());
        s = store;
        tenant = async (id) => recorded(store.forTenant(id), trace, off);
      }
      await e.body(t, recorded(s, trace, off), { kind, tenant, untraced });
    } finally {
      for (const c of closers.reverse()) await c();
    }
  }

  return {
    /** A test written once against StoreApi, run on every target. */
    test(name: string, body: Body) {
      entries.push({ name, shared: true, body });
    },
    /** A test of what exists only in-process (`why` says what), run on the store targets (or on `kinds`) alone. */
    storeOnly(name: string, why: string, body: StoreOnlyBody, kinds: StoreKind[] = STORE_KINDS) {
      entries.push({ name, shared: false, why, kinds, body });
    },
    run() {
      for (const kind of o.targets) {
        for (const e of entries) {
          if (e.shared) test(`${kind}: ${e.name}`, (t) => runShared(t, kind, e));
          else if (kind !== "http" && e.kinds.includes(kind)) {
            test(`${kind}: ${e.name} [store only: ${e.why}]`, (t) => e.body(t, { kind, open: (opts) => openStore(kind, opts), dir: tmp }));
          }
        }
      }
      if (o.targets.length > 1) {
        const [ref, ...others] = o.targets as [Kind, ...Kind[]];
        test(`parity: every call of the shared tests gives identical results on ${o.targets.join(", ")}`, (t) => {
          let calls = 0;
          let errors = 0;
          for (const [name, byKind] of traces) {
            const want = byKind.get(ref) ?? [];
            calls += want.length;
            errors += want.filter((x) => (x.out as { error?: string } | null)?.error).length;
            for (const kind of others) {
              const got = byKind.get(kind) ?? [];
              const i = want.findIndex((w, j) => JSON.stringify(w) !== JSON.stringify(got[j]));
              // the first differing call, readable; or else the whole trace has the same length
              if (i >= 0) t.deepEqual(got[i], want[i], `${name}: call ${i + 1} of ${want.length} on ${kind} differs from ${ref}`);
              else t.equal(got.length, want.length, `${name}: ${kind} = ${ref} (${want.length} calls)`);
            }
          }
          t.ok(calls > 0, `${calls} calls compared per target, ${errors} of them errors`);
          t.end();
        });
      }
      test.onFinish(async () => {
        for (const d of dirs) rmSync(d, { recursive: true, force: true });
        await stack?.close();
      });
    },
  };
}

/** Asserts that `p` rejects with an instance of `cls` whose message matches `re`. */
export async function rejects(t: test.Test, p: Promise<unknown>, cls: Function, re: RegExp, msg: string) {
  try {
    await p;
    t.fail(`${msg}: resolved`);
  } catch (e) {
    t.ok(e instanceof cls && re.test((e as Error).message), `${msg}: ${(e as Error).message}`);
  }
}
