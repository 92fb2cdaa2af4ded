// Data commands: `svc put/get/ls/rm/serve` through the HTTP client, with the tenant key from
// SVC_API_KEY and the gateway from SVC_GATE_URL. `.npy` files are recognised by their magic
// bytes, whatever their name. A command that only reads and prints (get, ls, search, topk, rm)
// loads no zod: names are checked by lib/client-names.ts and the client is lib/client-core.ts.
import { writeFile, rename, unlink } from "node:fs/promises";
import { clientCore, type SvcClient } from "../../lib/client-core.js";
import { keyProblem, namespaceProblem } from "../../lib/client-names.js";
import { readNpy, writeNpy, isNpyDtype } from "../../lib/npy.js";
import type { Dtype } from "../../lib/fields.js";
import { ValidationError } from "../../lib/errors.js";
import type { PutOptions } from "../../lib/schemas.js";
import { transferBar, type TransferBar } from "./transfer.js";
import { fmtBytes, gatewayUrl, readInput, intFlag, numFlag, parse, UsageError, type Io } from "./common.js";

const ENV_LINE = "Tenant key in SVC_API_KEY; gateway at SVC_GATE_URL (default http://127.0.0.1:8080).";

export const PUT_HELP = `Usage: svc put NS KEY FILE [--dtype D --shape a,b,c | --bytes] [--tolerance T] [--max-abs-error E] [--codec C] [--max-rank R] [--meta JSON] [--if-version N] [--json]

Stores FILE under NS/KEY as a new version and prints the verdict, codec, sizes, ratio,
measured errors and CUs.
A .npy file (recognised by its magic bytes, whatever its name) brings its dtype and shape;
flags given with it must agree. Any other file is raw little-endian data and needs
--dtype and --shape (for example --dtype float32 --shape 32,32,32), or --bytes to store it
as opaque bytes. --tolerance is the relative error allowed to the compression and
--max-abs-error the largest error of any element (0 for either: exact); --codec auto
(default: the smallest that meets them), tt, pred or lossless picks the codec of floating
data; --max-rank caps the TT ranks, --meta attaches a JSON object, --if-version N stores only
when the current version is N (0: only when the key does not exist yet). --json prints the
answer.
${ENV_LINE}`;

export const GET_HELP = `Usage: svc get NS KEY [--version N]

Prints an entry's metadata and fingerprint as JSON (no decompression). ${ENV_LINE}`;

export const LS_HELP = `Usage: svc ls NS [--prefix P] [--json]

Lists the keys of NS (all pages), one per line: key, version, dtype, shape, verdict, codec,
relative error, largest element error, updated.
${ENV_LINE}`;

export const RM_HELP = `Usage: svc rm NS KEY [--json]

Soft-deletes NS/KEY; it is purged after the retention period. ${ENV_LINE}`;

export const SERVE_HELP = `Usage: svc serve NS KEY -o OUT.npy [--slice 0:16,:,:] [--version N] [--dtype D]

Reconstructs an entry, or a block of it, to a .npy file. --slice takes one start:stop per
dimension, python-style: a bare index i means i:i+1, negative indices count from the end
(--slice -1,:,: works), missing trailing dimensions are whole. --dtype float16, float32 or
float64 converts floating data; bfloat16 entries are written as float32, bytes entries as a
uint8 vector. ${ENV_LINE}`;

export const SEARCH_HELP = `Usage: svc search NS [--filter JSON] [--prefix P] [--limit N] [--offset N] [--json]

Lists the entries of NS whose metadata match the filter, with their metadata, for example
--filter '{"run": {"$gte": 3}, "kind": {"$in": ["a", "b"]}}' (the filter language is in
docs/api.md). --limit (1-1000, default 100) and --offset page through the matches.
${ENV_LINE}`;

export const TOPK_HELP = `Usage: svc topk NS KEY [--k N] [--metric cosine|dot|l2] [--filter JSON] [--version N] [--include-self] [--json]

Ranks the latest versions of the entries of NS by similarity to NS/KEY (on the compressed TT
cores where entries have them, without reconstruction) and prints the k best (default 10),
best first, with their scores. Entries of another shape, and bytes entries, are skipped and
counted. --filter restricts the candidates by metadata; --include-self keeps KEY itself.
${ENV_LINE}`;

/** The overview printed by 'svc help data'. */
export const DATA_HELP = [PUT_HELP, GET_HELP, LS_HELP, RM_HELP, SERVE_HELP, SEARCH_HELP, TOPK_HELP].join("\n\n");

/**
 * The client of data commands; `patient` (bulk jobs) waits out long rate-limit windows, `bar`
 * shows a long put or serve on a terminal.
 */
export function dataClient(io: Io, patient = false, bar?: TransferBar, localCompress = true): SvcClient {
  const apiKey = io.env.SVC_API_KEY;
  if (!apiKey) throw new UsageError("SVC_API_KEY is not set: export the tenant API key printed by 'svc tenant create'.");
  // a wait of a second or more is said on stderr (the client records the answer before it sleeps),
  // so that a job held back by the rate limit does not look hung; once per window, however many
  // uploads of a bulk job wait on it, and for a bulk job on a terminal in place of its progress line
  let client: SvcClient | undefined;
  let saidUntil = 0;
  const sleep = (ms: number) => {
    const last = client?.lastResponse;
    const until = Date.now() + ms;
    if (ms >= 1000 && last && until > saidUntil + 1000) {
      saidUntil = until;
      const why =
        last.status === 429
          ? `the tenant's rate limit was reached${last.rate_limit.limit !== null ? ` (${last.rate_limit.limit} requests per window)` : ""}`
          : `the gateway answered ${last.status}`;
      io.err(
        patient && io.errIsTTY
          ? `\r${why}; waiting ${Math.ceil(ms / 1000)} s before going on…\x1b[K`
          : `svc: ${why}; waiting ${Math.ceil(ms / 1000)} s before going on.\n`,
      );
    }
    return new Promise<void>((r) => setTimeout(r, ms));
  };
  // the options are valid by construction: an http(s) address checked by gatewayUrl, a non-empty key
  client = clientCore({
    baseUrl: gatewayUrl(io),
    apiKey,
    sleep,
    ...(patient ? { maxRetries: 20, maxBackoffMs: 300_000 } : {}),
    ...(bar ? { onProgress: bar.onProgress } : {}),
    // a bulk job that compresses its files itself sends what it could not compress as it is
    ...(localCompress ? {} : { localCompressBytes: false as const }),
  });
  return client;
}

export function checkName(kind: "namespace" | "key", v: string): string {
  const problem = kind === "namespace" ? namespaceProblem(v) : keyProblem(v);
  if (problem !== null) throw new UsageError(`Invalid ${kind} '${v}': ${problem}.`);
  return v;
}

async function dtypeFlag(v: string | undefined): Promise<Dtype | undefined> {
  if (v === undefined) return undefined;
  const { DTYPES, dtypeSchema } = await import("../../lib/fields.js");
  const r = dtypeSchema.safeParse(v);
  if (!r.success) throw new UsageError(`--dtype must be one of ${DTYPES.join(", ")}.`);
  return r.data;
}

function shapeFlag(v: string | undefined): number[] | undefined {
  if (v === undefined) return undefined;
  const parts = v.split(",");
  if (!parts.every((p) => /^\d+$/.test(p.trim()) && Number(p) >= 1))
    throw new UsageError("--shape must be a comma list of positive integers, for example 128,128,128.");
  return parts.map(Number);
}

/** What is a .npy file, for `svc put` and `svc import` alike: its magic bytes, not its name. */
export const isNpy = (b: Buffer) => b.length >= 6 && b[0] === 0x93 && b.subarray(1, 6).toString("latin1") === "NUMPY";

export interface PreparedPut {
  data: Buffer;
  dtype: Dtype;
  shape: number[] | undefined;
}

/**
 * The payload, dtype and shape of FILE's bytes: a .npy file describes itself; raw data needs
 * --dtype and --shape, or --bytes (`asBytes`) to be stored as opaque bytes. Nothing is guessed.
 */
export function preparePut(buf: Buffer, dtype: Dtype | undefined, shape: number[] | undefined, file: string, asBytes = false): PreparedPut {
  if (asBytes) {
    if ((dtype !== undefined && dtype !== "bytes") || shape !== undefined)
      throw new UsageError("--bytes stores the file as opaque bytes: leave out --dtype and --shape.");
    return { data: buf, dtype: "bytes", shape: undefined };
  }
  if (isNpy(buf)) {
    const a = readNpy(buf);
    const npyShape = a.shape.length === 0 ? [1] : a.shape; // a 0-d array is stored as one element
    if (dtype !== undefined && dtype !== a.dtype) throw new UsageError(`--dtype ${dtype} disagrees with ${file}, whose header says ${a.dtype}.`);
    if (shape !== undefined && shape.join(",") !== npyShape.join(",")) {
      throw new UsageError(`--shape ${shape.join(",")} disagrees with ${file}, whose header says ${npyShape.join(",")}.`);
    }
    return { data: a.data, dtype: a.dtype, shape: npyShape };
  }
  if (dtype === undefined) {
    if (/\.npy$/i.test(file))
      throw new UsageError(`${file} is named .npy but does not start with the NumPy magic bytes; pass --bytes to store it as opaque bytes.`);
    throw new UsageError(
      `${file} is not a .npy file: describe its raw data with --dtype and --shape (for example --dtype float32 --shape 32,32,32), or pass --bytes to store it as opaque bytes.`,
    );
  }
  if (dtype !== "bytes" && shape === undefined) throw new UsageError(`--shape is required for raw ${dtype} data (${file} is not a .npy file).`);
  return { data: buf, dtype, shape };
}

export function parseMeta(v: string | undefined): Record<string, unknown> | undefined {
  if (v === undefined) return undefined;
  let m: unknown;
  try {
    m = JSON.parse(v);
  } catch {
    throw new UsageError("--meta must be a JSON object, for example '{\"run\": 3}'.");
  }
  if (m === null || typeof m !== "object" || Array.isArray(m)) throw new UsageError("--meta must be a JSON object, for example '{\"run\": 3}'.");
  return m as Record<string, unknown>;
}

/**
 * `--slice 0:16,:,-4:` against a shape: one [start, stop) pair per dimension, python-style
 * (negative indices count from the end; a bare index i means i:i+1; missing trailing dims are whole).
 */
export function parseSlice(spec: string, shape: number[]): Array<[number, number]> {
  const parts = spec.split(",");
  if (parts.length > shape.length) throw new UsageError(`--slice has ${parts.length} dimensions but the entry has ${shape.length}.`);
  const out: Array<[number, number]> = [];
  for (let i = 0; i < shape.length; i++) {
    const n = shape[i]!;
    const p = (parts[i] ?? ":").trim();
    const norm = (s: string, dflt: number): number => {
      if (s === "") return dflt;
      if (!/^-?\d+$/.test(s)) throw new UsageError(`--slice dimension ${i} '${p}' is not start:stop, for example 0:16.`);
      const x = Number(s);
      return x < 0 ? n + x : x;
    };
    let a: number;
    let b: number;
    if (p.includes(":")) {
      const [s, e, ...more] = p.split(":");
      if (more.length) throw new UsageError(`--slice dimension ${i} '${p}': steps are not supported.`);
      a = norm(s!, 0);
      b = Math.min(norm(e!, n), n);
    } else {
      a = norm(p, 0);
      b = a + 1;
    }
    if (a < 0 || a >= n || b <= a) throw new UsageError(`--slice dimension ${i} '${p}' selects nothing of a dimension of size ${n}.`);
    out.push([a, b]);
  }
  return out;
}

const pct = (x: number) => (x === 0 ? "0" : x.toExponential(2));

export async function putCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals, help } = parse(
    argv,
    {
      dtype: { type: "string" },
      shape: { type: "string" },
      tolerance: { type: "string" },
      "max-rank": { type: "string" },
      "max-abs-error": { type: "string" },
      codec: { type: "string" },
      meta: { type: "string" },
      "if-version": { type: "string" },
      json: { type: "boolean" },
      bytes: { type: "boolean" },
    },
    { min: 3, max: 3, names: "NS KEY FILE" },
  );
  if (help) {
    io.out(PUT_HELP + "\n");
    return 0;
  }
  const [ns, key, file] = positionals as [string, string, string];
  checkName("namespace", ns);
  checkName("key", key);
  const dtype = await dtypeFlag(values.dtype as string | undefined);
  const shape = shapeFlag(values.shape as string | undefined);
  const tolerance = numFlag(values.tolerance as string | undefined, "tolerance");
  const maxAbsError = numFlag(values["max-abs-error"] as string | undefined, "max-abs-error");
  const codec = values.codec as PutOptions["codec"] | undefined;
  const maxRank = intFlag(values["max-rank"] as string | undefined, "max-rank", 1);
  const ifVersion = intFlag(values["if-version"] as string | undefined, "if-version", 0);
  const metadata = parseMeta(values.meta as string | undefined);
  const bar = transferBar(io);
  const client = dataClient(io, false, bar);
  try {
    const p = preparePut(await readInput(file), dtype, shape, file, Boolean(values.bytes));
    const r = await client.put(ns, key, p.data, {
      dtype: p.dtype,
      shape: p.shape,
      tolerance,
      max_abs_error: maxAbsError,
      codec,
      max_rank: maxRank,
      metadata,
      if_version: ifVersion,
    });
    bar?.finish();
    if (values.json) io.out(JSON.stringify(r, null, 2) + "\n");
    else {
      io.out(
        `${r.namespace}/${r.key} version ${r.version}: ${r.verdict} (${r.fingerprint.codec}), ${fmtBytes(r.bytes_in)} -> ${fmtBytes(r.bytes_stored)} ` +
          `(ratio ${r.compression_ratio.toFixed(2)}, relative error ${pct(r.relative_error)}, max abs error ${pct(r.max_abs_error)}), ${client.lastResponse?.cus ?? "?"} CUs\n`,
      );
    }
    return 0;
  } finally {
    bar?.finish();
    await client.close();
  }
}

export async function getCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals, help } = parse(argv, { version: { type: "string" } }, { min: 2, max: 2, names: "NS KEY" });
  if (help) {
    io.out(GET_HELP + "\n");
    return 0;
  }
  const [ns, key] = positionals as [string, string];
  checkName("namespace", ns);
  checkName("key", key);
  const version = intFlag(values.version as string | undefined, "version", 1);
  const client = dataClient(io);
  try {
    io.out(JSON.stringify(await client.get(ns, key, { version }), null, 2) + "\n");
    return 0;
  } finally {
    await client.close();
  }
}

export async function lsCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals, help } = parse(argv, { prefix: { type: "string" }, json: { type: "boolean" } }, { min: 1, max: 1, names: "NS" });
  if (help) {
    io.out(LS_HELP + "\n");
    return 0;
  }
  const ns = checkName("namespace", positionals[0]!);
  const client = dataClient(io);
  try {
    const all = [];
    let offset: number | null = 0;
    while (offset !== null) {
      const page = await client.list(ns, { prefix: values.prefix as string | undefined, offset });
      all.push(...page.keys);
      offset = page.next_offset;
    }
    if (values.json) io.out(JSON.stringify({ namespace: ns, keys: all, total: all.length }, null, 2) + "\n");
    else if (all.length === 0) {
      // said on stderr: standard output stays a list (empty) for scripts
      const prefix = values.prefix ? ` whose key starts with '${values.prefix as string}'` : "";
      io.err(`No entries in namespace ${ns}${prefix}; 'svc put ${ns} KEY FILE' stores one.\n`);
    } else {
      const err = (x: number | null | undefined) => (x === null || x === undefined ? "-" : pct(x));
      for (const k of all)
        io.out(
          `${k.key}\tv${k.version}\t${k.dtype}\t${(k.shape ?? []).join("x")}\t${k.verdict}\t${k.codec ?? "-"}\t${err(k.relative_error)}\t${err(k.max_abs_error)}\t${k.updated_at}\n`,
        );
    }
    return 0;
  } finally {
    await client.close();
  }
}

export async function rmCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals, help } = parse(argv, { json: { type: "boolean" } }, { min: 2, max: 2, names: "NS KEY" });
  if (help) {
    io.out(RM_HELP + "\n");
    return 0;
  }
  const [ns, key] = positionals as [string, string];
  checkName("namespace", ns);
  checkName("key", key);
  const client = dataClient(io);
  try {
    const r = await client.delete(ns, key);
    io.out(values.json ? JSON.stringify(r, null, 2) + "\n" : `Deleted ${r.namespace}/${r.key} (last version ${r.version}); purged after ${r.purge_after}.\n`);
    return 0;
  } finally {
    await client.close();
  }
}

export async function serveCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals, help } = parse(
    argv,
    {
      output: { type: "string", short: "o" },
      slice: { type: "string" },
      version: { type: "string" },
      dtype: { type: "string" },
    },
    { min: 2, max: 2, names: "NS KEY" },
  );
  if (help) {
    io.out(SERVE_HELP + "\n");
    return 0;
  }
  const [ns, key] = positionals as [string, string];
  checkName("namespace", ns);
  checkName("key", key);
  const out = values.output as string | undefined;
  if (!out) throw new UsageError("-o OUT.npy is required.");
  let version = intFlag(values.version as string | undefined, "version", 1);
  const SERVE_DTYPES = ["float16", "float32", "float64"] as const;
  const want = values.dtype as string | undefined;
  if (want !== undefined && !(SERVE_DTYPES as readonly string[]).includes(want)) {
    throw new UsageError("--dtype must be float16, float32 or float64 (a conversion of floating data).");
  }
  let dtype = want as (typeof SERVE_DTYPES)[number] | undefined;
  const bar = transferBar(io);
  const client = dataClient(io, false, bar);
  try {
    let slice: Array<[number, number]> | undefined;
    // the slice syntax needs the shape, and bfloat16 entries need a float32 serve: read the metadata first
    const info = await client.get(ns, key, { version });
    version = info.version;
    if (values.slice !== undefined) slice = parseSlice(values.slice as string, info.shape ?? []);
    if (dtype === undefined && info.dtype === "bfloat16") dtype = "float32";
    const r = await client.serve(ns, key, { version, slice, dtype });
    bar?.finish();
    const arr = r.dtype === "bytes" ? { dtype: "uint8", shape: [r.data.byteLength], data: r.data } : { dtype: r.dtype, shape: r.shape, data: r.data };
    if (!isNpyDtype(arr.dtype)) throw new ValidationError(`The served dtype ${arr.dtype} cannot be written to a .npy file.`);
    const file = writeNpy(arr);
    // write then rename, so that a failure never leaves a half-written OUT
    const tmp = `${out}.partial-${process.pid}`;
    try {
      await writeFile(tmp, file);
      await rename(tmp, out);
    } catch (e) {
      await unlink(tmp).catch(() => undefined);
      throw e;
    }
    io.out(`Wrote ${out}: ${arr.dtype} [${arr.shape.join(", ")}], version ${r.version}, ${fmtBytes(file.length)}.\n`);
    return 0;
  } finally {
    bar?.finish();
    await client.close();
  }
}

/** --filter: a JSON object in the metadata filter language (checked by the service). */
function filterFlag(v: string | undefined): Record<string, unknown> | undefined {
  if (v === undefined) return undefined;
  let f: unknown;
  try {
    f = JSON.parse(v);
  } catch {
    f = undefined;
  }
  if (f === null || typeof f !== "object" || Array.isArray(f)) throw new UsageError(`--filter must be a JSON object, for example '{"run": {"$gte": 3}}'.`);
  return f as Record<string, unknown>;
}

export async function searchCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals, help } = parse(
    argv,
    {
      filter: { type: "string" },
      prefix: { type: "string" },
      limit: { type: "string" },
      offset: { type: "string" },
      json: { type: "boolean" },
    },
    { min: 1, max: 1, names: "NS" },
  );
  if (help) {
    io.out(SEARCH_HELP + "\n");
    return 0;
  }
  const ns = checkName("namespace", positionals[0]!);
  const filter = filterFlag(values.filter as string | undefined) ?? {};
  const limit = intFlag(values.limit as string | undefined, "limit", 1, 1000);
  const offset = intFlag(values.offset as string | undefined, "offset", 0);
  const client = dataClient(io);
  try {
    const r = await client.search(ns, filter, { prefix: values.prefix as string | undefined, limit, offset });
    if (values.json) io.out(JSON.stringify(r, null, 2) + "\n");
    else {
      for (const e of r.results) io.out(`${e.key}\tv${e.version}\t${JSON.stringify(e.metadata)}\n`);
      const more = r.next_offset !== null ? `; the next page starts at --offset ${r.next_offset}` : "";
      io.err(`${r.results.length} of ${r.total} matching entries${more}.\n`);
    }
    return 0;
  } finally {
    await client.close();
  }
}

export async function topkCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals, help } = parse(
    argv,
    {
      k: { type: "string" },
      metric: { type: "string" },
      filter: { type: "string" },
      version: { type: "string" },
      "include-self": { type: "boolean" },
      json: { type: "boolean" },
    },
    { min: 2, max: 2, names: "NS KEY" },
  );
  if (help) {
    io.out(TOPK_HELP + "\n");
    return 0;
  }
  const [ns, key] = positionals as [string, string];
  checkName("namespace", ns);
  checkName("key", key);
  const k = intFlag(values.k as string | undefined, "k", 1, 1000);
  const metric = values.metric as string | undefined;
  if (metric !== undefined && !["cosine", "dot", "l2"].includes(metric)) throw new UsageError("--metric must be cosine, dot or l2.");
  const version = intFlag(values.version as string | undefined, "version", 1);
  const filter = filterFlag(values.filter as string | undefined);
  const client = dataClient(io);
  try {
    const r = await client.query.topk(ns, {
      key,
      k,
      version,
      filter,
      metric: metric as "cosine" | undefined,
      include_self: Boolean(values["include-self"]),
    });
    if (values.json) io.out(JSON.stringify(r, null, 2) + "\n");
    else {
      for (const e of r.results) io.out(`${e.score.toPrecision(6)}\t${e.key}\tv${e.version}\n`);
      io.err(`${r.results.length} results by ${r.metric}; ${r.scanned} entries scanned, ${r.skipped} skipped (another shape or bytes).\n`);
    }
    return 0;
  } finally {
    await client.close();
  }
}
