// TensorStore (lib/tensor-store.ts), the type that createStore's Store and createClient's
// SvcClient share. Compile time: this file assigns both (and both factories) to it, calls
// methods through it, and holds @ts-expect-error lines that must stay errors; tsx does not
// type-check, so the first test runs tsc on it, with every test and bench (test/lib/tsconfig.json), and fails when
// the two sides drift. Run time: code written once against TensorStore runs on an in-memory
// store, and a store and a client both carry every member of it.
import test from "tape";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import {
  createClient,
  createStore,
  Store,
  NotFoundError,
  type ClientOptions,
  type PutResult,
  type StoreOptions,
  type SvcClient,
  type TensorStore,
  type TensorStoreGpuHandle,
} from "../../lib/index.js";

// ---- compile time ----

// the one-line switch: either factory gives a TensorStore
const embedded: (o: StoreOptions) => Promise<TensorStore> = createStore;
const hosted: (o: ClientOptions) => TensorStore = createClient;
const asTensorStore = (s: Store | SvcClient): TensorStore => s;
const asHandle = (h: Awaited<ReturnType<Store["serveGpu"]>> | Awaited<ReturnType<SvcClient["serveGpu"]>>): TensorStoreGpuHandle => h;

/** Every member of TensorStore, and of its query; the type below fails if one is missing here. */
const MEMBERS = [
  "put",
  "putCores",
  "putPred",
  "putCoresBatch",
  "get",
  "list",
  "search",
  "delete",
  "serve",
  "serveGpu",
  "close",
] as const satisfies readonly (keyof TensorStore)[];
const QUERY = ["similarity", "topk", "vector"] as const satisfies readonly (keyof TensorStore["query"])[];
const allListed: [Exclude<keyof TensorStore, (typeof MEMBERS)[number] | "query">, Exclude<keyof TensorStore["query"], (typeof QUERY)[number]>] extends [
  never,
  never,
]
  ? true
  : false = true;

// what TensorStore is not: these lines must stay type errors (tsc fails on an unused directive)
type NarrowPut = Omit<Store, "put"> & { put(ns: string, key: string, data: Float32Array): Promise<PutResult> };
const notOnTensorStore = [
  // @ts-expect-error compact is in-process only
  (s: TensorStore) => s.compact(),
  // @ts-expect-error forTenant is in-process only
  (s: TensorStore) => s.forTenant("acme"),
  // @ts-expect-error lastResponse is HTTP only
  (s: TensorStore) => s.lastResponse,
  // @ts-expect-error parameters compare strictly: a put that takes only Float32Array is not a TensorStore's put
  (s: NarrowPut): TensorStore => s,
  // @ts-expect-error a store without serveGpu is not a TensorStore
  (s: Omit<Store, "serveGpu">): TensorStore => s,
];

/** Code written once against the interface: the same on a store and on a client. */
async function roundTrip(store: TensorStore, ns: string) {
  const data = Int32Array.from({ length: 64 }, (_, i) => (i % 8) - 3);
  const put = await store.put(ns, "a", data, { shape: [8, 8], metadata: { run: 1 } });
  const info = await store.get(ns, "a");
  const block = await store.serve(ns, "a", {
    slice: [
      [0, 1],
      [0, 8],
    ],
  });
  const listed = await store.list(ns);
  const dot = await store.query.similarity(ns, "a", "a", { metric: "dot" });
  const gone = await store.delete(ns, "a");
  const after = await store.get(ns, "a").catch((e: unknown) => e);
  return { data, put, info, block, listed, dot, gone, after };
}

// ---- run time ----

test("TensorStore: tsc type-checks this file (Store and SvcClient assign to it; the @ts-expect-error lines stay errors)", (t) => {
  const root = fileURLToPath(new URL("../../", import.meta.url));
  const tsc = fileURLToPath(new URL("../../node_modules/typescript/bin/tsc", import.meta.url));
  const r = spawnSync(process.execPath, [tsc, "-p", "test/lib/tsconfig.json"], { cwd: root, encoding: "utf8" });
  t.equal(r.status, 0, `tsc -p test/lib/tsconfig.json exits 0${r.status === 0 ? "" : `:\n${r.stdout}${r.stderr}`}`);
  t.equal(allListed, true, "MEMBERS and QUERY list the whole interface");
  t.equal(notOnTensorStore.length, 5, "five shapes that are not a TensorStore");
  t.end();
});

test("TensorStore: code typed against it runs on an in-memory store", async (t) => {
  const store = await embedded({ path: ":memory:" });
  try {
    const r = await roundTrip(store, "default");
    t.deepEqual([r.put.version, r.put.dtype, r.put.shape, r.put.verdict], [1, "int32", [8, 8], "passthrough"], "put through the interface");
    t.deepEqual([r.info.version, r.info.metadata], [1, { run: 1 }], "get");
    t.deepEqual([r.block.shape, Array.from(r.block.data as Int32Array)], [[1, 8], Array.from(r.data.subarray(0, 8))], "serve of a slice, bit-exact");
    t.deepEqual(
      r.listed.keys.map((k) => k.key),
      ["a"],
      "list",
    );
    t.equal(
      r.dot.score,
      Array.from(r.data).reduce((s, x) => s + x * x, 0),
      "query.similarity (dot, exact on integers)",
    );
    t.deepEqual([r.gone.deleted, r.gone.version], [true, 1], "delete");
    t.ok(r.after instanceof NotFoundError, "the same error classes: get after delete is a NotFoundError");
  } finally {
    await store.close();
  }
});

test("TensorStore: a store and a client both carry every member", async (t) => {
  const store = asTensorStore(await createStore({ path: ":memory:" }));
  const client = hosted({ baseUrl: "http://127.0.0.1:9", apiKey: "k" }); // no request is made
  try {
    for (const [name, s] of [
      ["store", store],
      ["client", client],
    ] as const) {
      t.deepEqual(
        MEMBERS.filter((m) => typeof s[m] !== "function"),
        [],
        `${name}: every method is a function`,
      );
      t.deepEqual(
        QUERY.filter((m) => typeof s.query[m] !== "function"),
        [],
        `${name}: every query member is a function`,
      );
    }
    t.ok(store instanceof Store, "createStore gives a Store");
    t.equal(typeof asHandle, "function", "a store's and a client's GPU handles are TensorStoreGpuHandles (checked by tsc)");
  } finally {
    await client.close();
    await store.close();
  }
});
