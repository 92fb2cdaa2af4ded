// Data commands: `svc put/get/ls/rm/serve` through the HTTP client, with the tenant key from
// SVC_API_KEY and the gateway from SVC_GATE_URL. `.npy` files are recognised by their magic
// bytes, whatever their name. A command that only reads and prints (get, ls, search, topk, rm)
// loads no zod: names are checked by lib/client-names.ts and the client is lib/client-core.ts.
import { writeFile, rename, stat, unlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import { clientCore, type SvcClient } from "../../lib/client-core.js";
import { keyProblem, namespaceProblem, quickOptions } from "../../lib/client-names.js";
import { readNpy, writeNpy, isNpyDtype } from "../../lib/npy.js";
import type { Dtype } from "../../lib/fields.js";
import { itemsize } from "../../lib/dtypes.js";
import { ValidationError } from "../../lib/errors.js";
import { compileFilter } from "../../lib/filter.js";
import type { PutOptions } from "../../lib/schemas.js";
import type { DeleteResult, EntryInfo, ListResult, PutResult, SearchResult, TopkResult } from "../../lib/store/types.js";
import { transferBar, type TransferBar } from "./transfer.js";
import {
  apiKeyOf,
  fmtBytes,
  gatewayUrl,
  readInput,
  intFlag,
  MAX_STREAM_INPUT_BYTES,
  numFlag,
  parse,
  shown,
  UsageError,
  type Io,
  type Values,
} from "./common.js";

const ENV_LINE = "Tenant key in SVC_API_KEY; gateway at SVC_GATE_URL (default http://127.0.0.1:8080).";

export const PUT_HELP = `Usage: svc put NS KEY FILE [--dtype D --shape a,b,c | --bytes] [--tolerance T] [--max-abs-error E] [--codec C] [--max-rank R] [--meta JSON] [--if-version N] [--json]

Stores FILE under NS/KEY as a new version and prints the verdict, codec, sizes, ratio,
measured errors and CUs. FILE - reads standard input (at most what --dtype and --shape
describe, or 2 GiB).
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

Reconstructs an entry, or a block of it, to a .npy file (-o - writes it to standard output,
when that is a file or a pipe).
--slice takes one start:stop per dimension, python-style: a bare index i means i:i+1,
negative indices count from the end (--slice -1,:,: works), missing trailing dimensions are
whole (--slice 0:8, as numpy's a[0:8,]) and : is a whole dimension; an empty part is refused. --dtype float16, float32 or
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
  const apiKey = apiKeyOf(io);
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
  if (problem !== null) throw new UsageError(`Invalid ${kind} ${shown(v)}: ${problem}.`);
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

/** Room for a .npy header ahead of the data that --dtype and --shape describe. */
const NPY_HEADER_ROOM = 1024 * 1024;

/**
 * The bytes of `svc put`'s FILE (readInput). From a pipe or device with --dtype and --shape
 * given, no more is read than those describe (with room for a .npy header).
 */
function readPutInput(file: string, dtype: Dtype | undefined, shape: number[] | undefined, asBytes: boolean): Promise<Buffer> {
  if (asBytes || dtype === undefined || shape === undefined) return readInput(file);
  const described = shape.reduce((a, b) => a * b, itemsize(dtype));
  return readInput(
    file,
    Math.min(described + NPY_HEADER_ROOM, MAX_STREAM_INPUT_BYTES),
    () =>
      `${file === "-" ? "Standard input" : `${file} is not a regular file and`} sends more than the ${described} bytes that --dtype ${dtype} --shape ${shape.join(",")} describe; nothing was sent.`,
  );
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

/** The comma-separated parts of a --slice spec: one trailing comma dropped; an empty spec or part refused. */
export function sliceParts(spec: string): string[] {
  if (spec.trim() === "")
    throw new UsageError("--slice is empty: give one start:stop per dimension, for example 0:16,:,: (or leave out --slice for the whole entry).");
  const parts = spec.split(",").map((p) => p.trim());
  if (parts.length > 1 && parts[parts.length - 1] === "") parts.pop();
  const empty = parts.indexOf("");
  if (empty >= 0) {
    const fixed = parts.map((p) => p || ":").join(",");
    throw new UsageError(`--slice ${shown(spec)} has an empty dimension ${empty}: write : for a whole dimension (--slice ${fixed}).`);
  }
  return parts;
}

/**
 * `--slice 0:16,:,-4:` against a shape: one [start, stop) pair per dimension, python-style
 * (negative indices count from the end; a bare index i means i:i+1; missing trailing dims are
 * whole; one trailing comma is allowed, as in numpy's a[0:8,]). An empty spec or an empty part
 * between commas is a usage error: ':' is the whole dimension.
 */
export function parseSlice(spec: string, shape: number[]): Array<[number, number]> {
  const parts = sliceParts(spec);
  if (parts.length > shape.length) throw new UsageError(`--slice has ${parts.length} dimensions but the entry has ${shape.length}.`);
  const out: Array<[number, number]> = [];
  for (let i = 0; i < shape.length; i++) {
    const n = shape[i]!;
    const p = (parts[i] ?? ":").trim();
    const norm = (s: string, dflt: number): number => {
      if (s === "") return dflt;
      if (!/^-?\d+$/.test(s)) throw new UsageError(`--slice dimension ${i} ${shown(p)} is not start:stop, for example 0:16.`);
      const x = Number(s);
      return x < 0 ? n + x : x;
    };
    let a: number;
    let b: number;
    if (p.includes(":")) {
      const [s, e, ...more] = p.split(":");
      if (more.length) throw new UsageError(`--slice dimension ${i} ${shown(p)}: steps are not supported.`);
      a = norm(s!, 0);
      b = Math.min(norm(e!, n), n);
    } else {
      a = norm(p, 0);
      b = a + 1;
    }
    if (a < 0 || a >= n || b <= a) throw new UsageError(`--slice dimension ${i} ${shown(p)} selects nothing of a dimension of size ${n}.`);
    out.push([a, b]);
  }
  return out;
}

/** The options of a put that come from flags (svc put; svc import takes the first four). */
/** The fields of a put's answer that svc put and svc import print. */
export const PUT_ANSWER: Record<string, Want> = {
  namespace: "string",
  key: "string",
  version: "number",
  verdict: "string",
  "fingerprint.codec": "string",
  bytes_in: "number",
  bytes_stored: "number",
  compression_ratio: "number",
  relative_error: "number",
  max_abs_error: "number",
};

export type PutFlags = Pick<PutOptions, "tolerance" | "max_abs_error" | "codec" | "max_rank" | "metadata" | "if_version">;

const FLAG_OF: Record<string, string> = {
  tolerance: "tolerance",
  max_abs_error: "max-abs-error",
  codec: "codec",
  max_rank: "max-rank",
  metadata: "meta",
  if_version: "if-version",
};

/**
 * --tolerance, --max-abs-error, --codec, --max-rank, --meta and --if-version, checked with the
 * store's own rules (its put options schema) before any file is read or request made: a value
 * the store would refuse is a usage error naming the flag, for svc put and svc import alike.
 */
export async function putFlags(values: Values): Promise<PutFlags> {
  const codec = values.codec as string | undefined;
  if (codec !== undefined && !["auto", "tt", "pred", "lossless"].includes(codec)) throw new UsageError("--codec must be one of auto, tt, pred, lossless.");
  const o: PutFlags = {
    tolerance: numFlag(values.tolerance as string | undefined, "tolerance"),
    max_abs_error: numFlag(values["max-abs-error"] as string | undefined, "max-abs-error"),
    codec: codec as PutOptions["codec"],
    max_rank: intFlag(values["max-rank"] as string | undefined, "max-rank", 1),
    metadata: parseMeta(values.meta as string | undefined),
    if_version: intFlag(values["if-version"] as string | undefined, "if-version", 0),
  };
  const given = Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
  if (Object.keys(given).length > 0) {
    const { putOptionsSchema } = await import("../../lib/schemas.js");
    const r = putOptionsSchema.safeParse(given);
    if (!r.success) {
      const issue = r.error.issues[0]!;
      throw new UsageError(`--${FLAG_OF[String(issue.path[0])] ?? String(issue.path[0])}: ${issue.message.replace(/\.$/, "")}.`);
    }
  }
  return o;
}

type Want = "string" | "number" | "number|null" | "array" | "array|null" | "object";
const IS: Record<Want, (x: unknown) => boolean> = {
  string: (x) => typeof x === "string",
  number: (x) => typeof x === "number",
  "number|null": (x) => x === null || typeof x === "number",
  array: Array.isArray,
  "array|null": (x) => x === null || Array.isArray(x),
  object: (x) => x !== null && typeof x === "object" && !Array.isArray(x),
};

/**
 * `v`, an answer of the gateway, when it has the fields this command prints (`want`: dotted
 * paths; `items` checks every element of a list field the same way); otherwise one sentence
 * saying that the server at SVC_GATE_URL did not answer as svc does (another program there),
 * instead of a TypeError from reading a field that is missing.
 */
export function svcAnswer<T>(io: Io, what: string, v: unknown, want: Record<string, Want>, items?: [string, Record<string, Want>]): T {
  const at = (o: unknown, path: string) =>
    path.split(".").reduce<unknown>((x, k) => (x !== null && typeof x === "object" ? (x as Record<string, unknown>)[k] : undefined), o);
  const bad = (o: unknown, w: Record<string, Want>) => Object.entries(w).find(([path, kind]) => !IS[kind](at(o, path)))?.[0];
  let missing = IS.object(v) ? bad(v, want) : "a JSON object";
  if (missing === undefined && items) {
    const list = at(v, items[0]) as unknown[];
    for (const item of list) {
      const m = IS.object(item) ? bad(item, items[1]) : "an object";
      if (m !== undefined) {
        missing = `${items[0]}[].${m}`;
        break;
      }
    }
  }
  if (missing === undefined) return v as T;
  throw new NotSvcAnswer(
    `The server at ${gatewayUrl(io)} answered ${what} with JSON that is not svc's (no ${missing}): check that SVC_GATE_URL is the address of an svc gateway.`,
  );
}

/** An answer of another program than svc's gateway (exit 1). */
export class NotSvcAnswer extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NotSvcAnswer";
  }
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
  const flags = await putFlags(values);
  const bar = transferBar(io);
  const client = dataClient(io, false, bar);
  try {
    const p = preparePut(
      await readPutInput(file, dtype, shape, Boolean(values.bytes)),
      dtype,
      shape,
      file === "-" ? "standard input" : file,
      Boolean(values.bytes),
    );
    const r = svcAnswer<PutResult>(io, "the put", await client.put(ns, key, p.data, { dtype: p.dtype, shape: p.shape, ...flags }), PUT_ANSWER);
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
    const info = svcAnswer(io, "the get", await client.get(ns, key, { version }), { key: "string", version: "number", dtype: "string" });
    io.out(JSON.stringify(info, null, 2) + "\n");
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
  const prefix = await prefixFlag(values.prefix as string | undefined);
  const client = dataClient(io);
  try {
    const all = [];
    let offset: number | null = 0;
    while (offset !== null) {
      const page: ListResult = svcAnswer<ListResult>(io, "the list", await client.list(ns, { prefix, offset }), { keys: "array", next_offset: "number|null" }, [
        "keys",
        { key: "string", version: "number" },
      ]);
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
    const r = svcAnswer<DeleteResult>(io, "the delete", await client.delete(ns, key), {
      namespace: "string",
      key: "string",
      version: "number",
      purge_after: "string",
    });
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
  if (values.slice !== undefined) sliceParts(values.slice as string); // its syntax before any request
  const toStdout = out === "-";
  if (toStdout && io.outIsTTY)
    throw new UsageError(
      `-o - writes the .npy file's binary bytes to standard output, which is a terminal here; redirect it (svc serve ${ns} ${key} -o - > ${npyNameOf(key)}) or pipe it to a program.`,
    );
  if (!toStdout) await checkOutput(out, key);
  const bar = transferBar(io);
  const client = dataClient(io, false, bar);
  try {
    let slice: Array<[number, number]> | undefined;
    // the slice syntax needs the shape, and bfloat16 entries need a float32 serve: read the metadata first
    const info = svcAnswer<EntryInfo>(io, "the get", await client.get(ns, key, { version }), { version: "number", dtype: "string", shape: "array|null" });
    version = info.version;
    if (values.slice !== undefined) slice = parseSlice(values.slice as string, info.shape ?? []);
    if (dtype === undefined && info.dtype === "bfloat16") dtype = "float32";
    const r = await client.serve(ns, key, { version, slice, dtype }).catch((e: unknown) => {
      // the client builds the array from the answer's fields: another program's answer fails there
      if (e instanceof TypeError || e instanceof RangeError) svcAnswer(io, "the serve", null, {});
      throw e;
    });
    bar?.finish();
    const arr = r.dtype === "bytes" ? { dtype: "uint8", shape: [r.data.byteLength], data: r.data } : { dtype: r.dtype, shape: r.shape, data: r.data };
    if (!isNpyDtype(arr.dtype)) throw new ValidationError(`The served dtype ${arr.dtype} cannot be written to a .npy file.`);
    const file = writeNpy(arr);
    if (toStdout) {
      // the .npy alone on standard output; a reader that stops early (| head -c 10) is no failure
      if (io.outBytes) await io.outBytes(file);
      else io.out(file.toString("latin1"));
      return 0;
    }
    // write then rename, so that a failure never leaves a half-written OUT
    const tmp = `${out}.partial-${process.pid}`;
    try {
      await writeFile(tmp, file);
      await rename(tmp, out);
    } catch (e) {
      await unlink(tmp).catch(() => undefined);
      throw outputError(e, out, key);
    }
    io.out(`Wrote ${out}: ${arr.dtype} [${arr.shape.join(", ")}], version ${r.version}, ${fmtBytes(file.length)}.\n`);
    return 0;
  } finally {
    bar?.finish();
    await client.close();
  }
}

const npyNameOf = (key: string) => `${key.split("/").pop()}.npy`;

/**
 * -o OUT of svc serve, before any request: a directory, or a file in a directory that does not
 * exist, is a usage error naming OUT (not the temporary file the write goes through).
 */
async function checkOutput(out: string, key: string): Promise<void> {
  const st = await stat(out).catch(() => null);
  if (st?.isDirectory()) throw new UsageError(`-o ${out} is a directory: name the file to write, for example -o ${join(out, npyNameOf(key))}.`);
  const dir = dirname(out);
  const ds = await stat(dir).catch(() => null);
  if (ds === null) throw new UsageError(`-o ${out}: the directory ${dir} does not exist; create it first (mkdir -p ${dir}) or write elsewhere.`);
  if (!ds.isDirectory()) throw new UsageError(`-o ${out}: ${dir} is not a directory.`);
}

/** A failure to write OUT, named by OUT and said as one sentence. */
function outputError(e: unknown, out: string, key: string): unknown {
  const code = (e as NodeJS.ErrnoException).code;
  if (typeof code !== "string") return e;
  switch (code) {
    case "EISDIR":
      return new UsageError(`-o ${out} is a directory: name the file to write, for example -o ${join(out, npyNameOf(key))}.`);
    case "ENOENT":
    case "ENOTDIR":
      return new UsageError(`-o ${out}: the directory ${dirname(out)} does not exist; create it first (mkdir -p ${dirname(out)}) or write elsewhere.`);
    case "EACCES":
    case "EPERM":
    case "EROFS":
      return new Error(`${out} cannot be written (${code}): write it somewhere you may write, with -o.`);
    case "ENOSPC":
    case "EDQUOT":
      return new Error(`${out} could not be written: no space left on its device (${code}).`);
    default:
      return new Error(`${out} could not be written (${code}).`);
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
  // the store's own check of the filter language (loaded with the client, no zod)
  try {
    compileFilter(f);
  } catch (e) {
    if (!(e instanceof ValidationError)) throw e;
    throw new UsageError(`--filter: ${e.message.replace(/\.$/, "")} (the filter language is in docs/api.md).`);
  }
  return f as Record<string, unknown>;
}

/** --prefix: the key alphabet; the store's sentence (its schema, loaded only for a bad prefix) when it is not. */
async function prefixFlag(v: string | undefined): Promise<string | undefined> {
  if (v === undefined || quickOptions("list", { prefix: v }) !== null) return v;
  const { prefixSchema } = await import("../../lib/schemas.js");
  const r = prefixSchema.safeParse(v);
  if (!r.success) throw new UsageError(`--prefix ${shown(v)}: ${r.error.issues[0]!.message.replace(/\.$/, "")}.`);
  return v;
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
  const prefix = await prefixFlag(values.prefix as string | undefined);
  const limit = intFlag(values.limit as string | undefined, "limit", 1, 1000);
  const offset = intFlag(values.offset as string | undefined, "offset", 0);
  const client = dataClient(io);
  try {
    const r = svcAnswer<SearchResult>(
      io,
      "the search",
      await client.search(ns, filter, { prefix, limit, offset }),
      { results: "array", total: "number", next_offset: "number|null" },
      ["results", { key: "string", version: "number" }],
    );
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
    const answer = await client.query.topk(ns, {
      key,
      k,
      version,
      filter,
      metric: metric as "cosine" | undefined,
      include_self: Boolean(values["include-self"]),
    });
    const r = svcAnswer<TopkResult>(io, "the top-k query", answer, { metric: "string", results: "array", scanned: "number", skipped: "number" }, [
      "results",
      { key: "string", version: "number", score: "number" },
    ]);
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
