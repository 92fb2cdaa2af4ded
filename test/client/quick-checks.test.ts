// The client's quick checks (lib/client-names.ts, no zod) against the store's schemas: every
// input the quick checks accept is accepted by the schema with the same output, a name they
// refuse is refused with the schema's own sentence, and a `svc get` or `svc ls` process loads
// no zod and no undici (nor do search, topk, rm, usage --mine and tenant list).
import test from "tape";
import { spawnSync } from "node:child_process";
import { fileURLToPath, pathToFileURL } from "node:url";
import { keyProblem, namespaceProblem, quickOptions, tenantIdProblem, type QuickKind } from "../../lib/client-names.js";
import { keySchema, namespaceSchema, tenantIdSchema } from "../../lib/fields.js";
import { getOptionsSchema, listOptionsSchema, searchOptionsSchema, topkOptionsSchema } from "../../lib/schemas.js";

const NAMES = [
  "",
  "a",
  "A-z_09",
  "a b",
  "ns/x",
  "é",
  "x".repeat(255),
  "x".repeat(256),
  "x".repeat(512),
  "x".repeat(513),
  "field/t0",
  "a//b",
  "/a",
  "a/",
  "./a",
  "a/..",
  "a/.b",
  "...",
  "a/./b",
  "a/.../b",
  "//",
  "a/b/..",
  "run=3:x@y.z",
  "a\nb",
  "..",
  ".",
  "a.b/c-d_e",
  "acme",
  "Acme",
  "team-1_x",
  "x".repeat(64),
  "x".repeat(65),
];

test("quick checks: namespaces, keys and tenant ids as the schemas, with the schemas' first sentence", (t) => {
  for (const [schema, problem, what] of [
    [namespaceSchema, namespaceProblem, "namespace"],
    [keySchema, keyProblem, "key"],
    [tenantIdSchema, tenantIdProblem, "tenant_id"],
  ] as const) {
    for (const v of NAMES) {
      const r = schema.safeParse(v);
      const p = problem(v);
      t.equal(p === null, r.success, `${what} ${JSON.stringify(v.slice(0, 20))}: accepted alike`);
      if (!r.success) t.equal(p, r.error.issues[0]!.message, `${what} ${JSON.stringify(v.slice(0, 20))}: the same sentence`);
    }
  }
  t.end();
});

test("quick checks: every key of up to six characters of a, . and / is accepted as keySchema accepts it", (t) => {
  const keys = [""];
  for (let n = 1, last = [""]; n <= 6; n++) {
    last = last.flatMap((k) => ["a", ".", "/"].map((c) => k + c));
    keys.push(...last);
  }
  const differ = keys.filter((k) => (keyProblem(k) === null) !== keySchema.safeParse(k).success);
  t.deepEqual(differ, [], `${keys.length} keys, none judged otherwise`);
  t.ok(
    keys.some((k) => keyProblem(k) === null),
    "some accepted",
  );
  t.end();
});

const SCHEMAS = { get: getOptionsSchema, list: listOptionsSchema, search: searchOptionsSchema, topk: topkOptionsSchema };
const OPTIONS: Record<QuickKind, unknown[]> = {
  get: [
    {},
    { version: undefined },
    { version: 1 },
    { version: 7 },
    { version: 0 },
    { version: 1.5 },
    { version: "2" },
    { version: NaN },
    { version: 2 ** 53 },
    { v: 1 },
    null,
    [],
    "x",
  ],
  list: [
    {},
    { prefix: "" },
    { prefix: "field/" },
    { prefix: "a b" },
    { prefix: "x".repeat(513) },
    { limit: 1 },
    { limit: 1000 },
    { limit: 1001 },
    { limit: 0 },
    { offset: 0 },
    { offset: 5 },
    { offset: -1 },
    { offset: 0.5 },
    { prefix: undefined, limit: undefined, offset: undefined },
    { page: 2 },
    null,
  ],
  search: [{}, { limit: 50 }, { limit: 1000, offset: 10, prefix: "a" }, { limit: 1001 }, { offset: "1" }],
  topk: [
    { key: "k" },
    { key: "a/b", k: 3 },
    { key: "k", k: 1000, metric: "dot", filter: { run: { $gte: 2 } }, include_self: true, version: 2 },
    { key: "k", k: undefined, metric: undefined, filter: undefined, include_self: undefined, version: undefined },
    { key: "k", k: 0 },
    { key: "k", k: 1001 },
    { key: "k", metric: "cos" },
    { key: "k", filter: [] },
    { key: "k", filter: null },
    { key: "k", include_self: 1 },
    { key: "" },
    {},
    { key: "k", extra: 1 },
    { key: "k", version: 0 },
    { key: "k", filter: Object.create(null) as object },
  ],
};
const strip = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));

test("quick checks: options accepted quickly are the schemas' output; the rest is left to the schemas", (t) => {
  let quick = 0;
  for (const kind of Object.keys(OPTIONS) as QuickKind[]) {
    for (const v of OPTIONS[kind]) {
      const q = quickOptions(kind, v);
      if (q === null) continue;
      quick++;
      const r = SCHEMAS[kind].safeParse(v);
      t.ok(r.success, `${kind} ${JSON.stringify(v)}: the schema accepts it too`);
      if (r.success) t.same(q, strip(r.data as Record<string, unknown>), `${kind} ${JSON.stringify(v)}: the same output`);
    }
  }
  // every valid form above is taken quickly; none of the refused ones is
  for (const kind of Object.keys(OPTIONS) as QuickKind[]) {
    for (const v of OPTIONS[kind]) {
      const plain =
        v !== null &&
        typeof v === "object" &&
        Object.getPrototypeOf(v) === Object.prototype &&
        !(kind === "topk" && Object.getPrototypeOf((v as { filter?: unknown }).filter ?? {}) === null);
      if (plain && SCHEMAS[kind].safeParse(v).success) t.notEqual(quickOptions(kind, v), null, `${kind} ${JSON.stringify(v)}: taken quickly`);
    }
  }
  t.ok(quick >= 15, `${quick} forms taken quickly`);
  t.end();
});

// a module hook that names on standard error every module the process loads (writeSync from
// the hooks' thread: no line is left in a buffer when the process exits)
const TRACE = `data:text/javascript,${encodeURIComponent(`
  import { register } from "node:module";
  register("data:text/javascript," + encodeURIComponent("import { writeSync } from 'node:fs'; export async function load(u, c, next) { writeSync(2, 'loaded ' + u + '\\\\n'); return next(u, c); }"));
`)}`;

test("quick checks: svc get, ls, search, topk, rm, usage --mine and tenant list load neither zod nor undici", (t) => {
  const main = fileURLToPath(new URL("../../bin/cli/main.ts", import.meta.url));
  for (const args of [
    ["get", "ns", "k"],
    ["ls", "ns"],
    ["search", "ns", "--limit", "5"],
    ["topk", "ns", "k", "--k", "3"],
    ["rm", "ns", "k"],
    ["usage", "--mine"],
    ["tenant", "list"],
    ["put", "ns", "k", "x.npy", "--dtype", "float32", "--shape", "4"],
  ]) {
    // nothing listens on port 1: the command fails after loading what it needs
    const r = spawnSync(
      process.execPath,
      [
        "--import",
        "tsx",
        "--import",
        TRACE,
        "--input-type=module",
        "-e",
        `
      const { main } = await import(${JSON.stringify(pathToFileURL(main).href)});
      const errs = [];
      await main(${JSON.stringify(args)}, { out: () => {}, err: (s) => errs.push(s), env: { SVC_API_KEY: "svc_live_x", SVC_GATE_URL: "http://127.0.0.1:1", SVC_GATE_ENGINE_SERVICE_KEY: "s".repeat(64) }, errIsTTY: false });
      process.stdout.write(errs.join(""));
    `,
      ],
      { encoding: "utf8", env: { ...process.env, NODE_OPTIONS: "" } },
    );
    const loaded = r.stderr.split("\n").filter((l) => l.startsWith("loaded "));
    const heavy = loaded.filter((l) => /node_modules\/(zod|undici)\//.test(l));
    t.equal(r.status, 0, `svc ${args.join(" ")}: the probe ran${r.status === 0 ? "" : ` (${r.stderr.slice(0, 400)})`}`);
    t.ok(
      loaded.some((l) => l.endsWith("/lib/client-http.ts")),
      `svc ${args.join(" ")}: the trace sees the HTTP client load (${loaded.length} modules)`,
    );
    if (args[0] === "put") {
      // a put with --dtype checks it with the schema of dtypes: the trace does see zod
      t.ok(
        heavy.some((l) => l.includes("/zod/")),
        "svc put: zod is loaded (the trace would see it)",
      );
      t.match(r.stdout, /No such file or directory: x\.npy/, "svc put: failed on its file");
    } else {
      t.match(r.stdout, /Nothing answers at http:\/\/127\.0\.0\.1:1/, `svc ${args.join(" ")}: reached the transport`);
      t.same(heavy, [], `svc ${args.join(" ")}: no zod or undici module loaded`);
    }
  }
  t.end();
});
