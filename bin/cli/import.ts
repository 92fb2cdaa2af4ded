// `svc import NS DIR`: every .npy file under DIR, keyed by its path relative to DIR without
// the extension (`runs/a/t0.npy` → key `runs/a/t0`). A file that fails (corrupt header, bad
// key, refused by the service) is reported and the rest go on; the exit code is 1 when any
// failed. Progress on standard error, summary on standard output. float32/float64 files are
// compressed here with the engine's codecs and its choice between them: TT cores are sent many
// to a request (put_cores_batch), so that an import of many small smooth files does not spend the
// tenant's rate limit one file at a time; prediction streams go one to a request (a put with
// encoding pred), --concurrency at a time.
import { readdir, readFile, stat } from "node:fs/promises";
import { join, relative, sep } from "node:path";
import { keySchema } from "../../lib/fields.js";
import type { SvcClient } from "../../lib/client-core.js";
import { chooseLocally, LOCAL_MIN_COMPRESS_BYTES, locallyCompressible, type LocalOptions, type LocalTT } from "../../lib/client-compress.js";
import type { PutCoresItem } from "../../lib/store/put.js";
import type { PutResult } from "../../lib/store/index.js";
import { typedArrayOf } from "../../lib/client-core.js";
import { checkName, dataClient, isNpy, preparePut, putFlags, svcAnswer } from "./data.js";
import { Progress } from "./progress.js";
import { fmtBytes, intFlag, parse, ReportedFailure, UsageError, type Io, shown } from "./common.js";

export const IMPORT_HELP = `Usage: svc import NS DIR [--tolerance T] [--max-abs-error E] [--codec C] [--max-rank R] [--concurrency N] [--batch N] [--json]

Uploads every .npy file under DIR (recursively) to namespace NS; the key of a file is its path
relative to DIR without .npy, with / between directories. Files are selected by their .npy
name and must start with the NumPy magic bytes, as for svc put; others are reported as failed.
A symbolic link to a file is read as that file (links to directories are not followed); a
dangling link, a FIFO or another path named .npy that is not a file is reported as failed.
When the tenant's rate limit is reached the import waits for the window (Retry-After) and
says so on standard error. Shows a progress bar on a terminal
(plain lines otherwise) and ends with a summary: files, bytes in, bytes stored, ratio, verdicts
and the failures with their reasons. A failed file does not stop the others; the exit code is 1
when any failed. --concurrency (default 4) uploads that many files at once. float32 and float64
files are compressed here with the engine's codecs, chosen as the engine chooses them
(--tolerance, --max-abs-error and --codec as for svc put): smooth files as TT cores, sent
--batch at a time (default 100, at most 4 MiB of cores per request), others as prediction
streams, one per request; --batch 1 sends every file with its own put. Other dtypes go one per
request.`;

export interface ImportFile {
  path: string;
  key: string;
  size: number;
  /** Why a path named .npy cannot be read as a file (a dangling link, a FIFO): it fails with this reason. */
  problem?: string;
}

/** What a directory entry that is not a regular file is, in words. */
function kindOf(e: { isFIFO(): boolean; isSocket(): boolean; isBlockDevice(): boolean; isCharacterDevice(): boolean; isDirectory(): boolean }): string {
  if (e.isFIFO()) return "a FIFO";
  if (e.isSocket()) return "a socket";
  if (e.isBlockDevice() || e.isCharacterDevice()) return "a device";
  if (e.isDirectory()) return "a directory";
  return "not a regular file";
}

/**
 * The .npy files under `dir`, sorted by key. A symbolic link to a regular file is read as that
 * file (keyed by the link's path); links to directories are not followed. A path named .npy that
 * is not a file (a dangling link, a link to a directory, a FIFO, a socket, a device) is listed
 * with its `problem`, so that the import reports it as failed instead of skipping it unsaid.
 */
export async function findNpyFiles(dir: string): Promise<ImportFile[]> {
  const out: ImportFile[] = [];
  async function walk(d: string): Promise<void> {
    const entries = await readdir(d, { withFileTypes: true });
    for (const e of entries) {
      const p = join(d, e.name);
      if (e.isDirectory()) {
        await walk(p);
        continue;
      }
      if (!e.name.toLowerCase().endsWith(".npy")) continue;
      const key = relative(dir, p).split(sep).join("/").slice(0, -4);
      if (e.isFile()) {
        out.push({ path: p, key, size: (await stat(p)).size });
        continue;
      }
      let problem: string;
      if (e.isSymbolicLink()) {
        const target = await stat(p).catch((err: NodeJS.ErrnoException) => err);
        if (!(target instanceof Error) && target.isFile()) {
          out.push({ path: p, key, size: target.size });
          continue;
        }
        problem =
          target instanceof Error
            ? target.code === "ENOENT"
              ? "a symbolic link to nothing (its target does not exist)"
              : `a symbolic link whose target cannot be read (${target.code ?? target.message})`
            : `a symbolic link to ${kindOf(target)}, not to a file`;
      } else problem = `${kindOf(e)}, not a file`;
      out.push({ path: p, key, size: 0, problem });
    }
  }
  await walk(dir);
  return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

export interface ImportSummary {
  files: number;
  imported: number;
  failed: number;
  bytes_in: number;
  bytes_stored: number;
  ratio: number | null;
  verdicts: Record<string, number>;
  failures: Array<{ file: string; reason: string }>;
  seconds: number;
}

/** Largest total of cores in one put_cores_batch request (their JSON is 4/3 of it). */
const BATCH_CORE_BYTES = 4 * 1024 * 1024;

interface Pending {
  f: ImportFile;
  tt: LocalTT;
  shape: number[];
}

export async function importFiles(
  client: Pick<SvcClient, "put" | "putPred" | "putCoresBatch">,
  ns: string,
  files: ImportFile[],
  opts: LocalOptions & { concurrency: number; batch?: number },
  progress: Progress,
): Promise<ImportSummary> {
  const t0 = performance.now();
  const s: ImportSummary = { files: files.length, imported: 0, failed: 0, bytes_in: 0, bytes_stored: 0, ratio: null, verdicts: {}, failures: [], seconds: 0 };
  const queue = [...files];
  const batch = opts.batch ?? 100;
  let pending: Pending[] = [];
  let pendingBytes = 0;
  const failed = (f: ImportFile, e: unknown) => {
    const reason = (e instanceof Error ? e.message : String(e)).replace(/\.$/, "");
    s.failed++;
    s.failures.push({ file: f.path, reason });
    progress.done(f.key, f.size, false, reason);
  };
  const stored = (f: ImportFile, r: PutResult) => {
    s.imported++;
    s.bytes_in += r.bytes_in;
    s.bytes_stored += r.bytes_stored;
    s.verdicts[r.verdict] = (s.verdicts[r.verdict] ?? 0) + 1;
    progress.done(f.key, f.size, true, `${r.verdict}, ratio ${r.compression_ratio.toFixed(2)}`);
  };
  // one request for the files gathered so far; the batch is one transaction, so a refusal fails them all
  async function flush(): Promise<void> {
    const items = pending;
    pending = [];
    pendingBytes = 0;
    if (items.length === 0) return;
    try {
      const wire: PutCoresItem[] = items.map(({ f, tt, shape }) => ({
        key: f.key,
        shape,
        cores: tt.cores.map((c, i) => ({ shape: [tt.ranks[i]!, tt.modes[i]!, tt.ranks[i + 1]!] as [number, number, number], data: c })),
      }));
      const { results } = await client.putCoresBatch(ns, wire);
      // put_cores records a given TT; the verdict and errors are those measured here
      items.forEach(({ f, tt }, i) => stored(f, { ...results[i]!, verdict: tt.verdict, relative_error: tt.relative_error, max_abs_error: tt.max_abs_error }));
    } catch (e) {
      for (const { f } of items) failed(f, e);
    }
  }
  async function worker(): Promise<void> {
    for (let f = queue.shift(); f; f = queue.shift()) {
      let r: PutResult | undefined;
      try {
        if (f.problem !== undefined) throw new Error(f.problem);
        const k = keySchema.safeParse(f.key);
        if (!k.success) throw new Error(`the key ${shown(f.key)} derived from the path is invalid: ${k.error.issues[0]!.message}`);
        const buf = await readFile(f.path);
        // the same test as svc put: the magic bytes decide, the .npy name only selects the file
        if (!isNpy(buf)) throw new Error("named .npy but does not start with the NumPy magic bytes");
        const p = preparePut(buf, undefined, undefined, f.path);
        const local: LocalOptions = { tolerance: opts.tolerance, max_abs_error: opts.max_abs_error, codec: opts.codec, max_rank: opts.max_rank };
        const o = { dtype: p.dtype, shape: p.shape, ...local };
        if (batch > 1 && p.shape && p.data.byteLength >= LOCAL_MIN_COMPRESS_BYTES && locallyCompressible(p.dtype, o)) {
          const values = typedArrayOf(p.dtype, p.data) as Float32Array | Float64Array;
          const choice = values.every(Number.isFinite) ? await chooseLocally(values, p.shape, local) : null;
          if (choice?.kind === "tt") {
            pending.push({ f, tt: choice.tt, shape: p.shape });
            pendingBytes += choice.tt.cores.reduce((a, c) => a + c.byteLength, 0);
            if (pending.length >= batch || pendingBytes >= BATCH_CORE_BYTES) await flush();
            continue;
          }
          if (choice?.kind === "pred") {
            const { stream, relative_error, max_abs_error } = choice.pred;
            r = await client.putPred(ns, f.key, stream, { dtype: p.dtype as "float32" | "float64", shape: p.shape, relative_error, max_abs_error });
          }
        }
        // not compressible here (or not floating): one put, which the engine answers in its own words
        r ??= await client.put(ns, f.key, p.data, o);
      } catch (e) {
        failed(f, e);
        continue;
      }
      stored(f, r);
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(opts.concurrency, files.length)) }, worker));
  await flush();
  progress.finish();
  s.failures.sort((a, b) => a.file.localeCompare(b.file));
  s.ratio = s.bytes_stored > 0 ? s.bytes_in / s.bytes_stored : null;
  s.seconds = (performance.now() - t0) / 1000;
  return s;
}

export function formatSummary(s: ImportSummary): string {
  const verdicts =
    Object.entries(s.verdicts)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([v, n]) => `${v} ${n}`)
      .join(", ") || "none";
  let t =
    `Imported ${s.imported} of ${s.files} files in ${s.seconds.toFixed(1)} s: ` +
    `${fmtBytes(s.bytes_in)} in, ${fmtBytes(s.bytes_stored)} stored, ratio ${s.ratio === null ? "n/a" : s.ratio.toFixed(2)}.\n` +
    `Verdicts: ${verdicts}.\n`;
  if (s.failed) {
    t += `${s.failed} failed:\n`;
    for (const f of s.failures) t += `  ${f.file}: ${f.reason}.\n`;
  }
  return t;
}

export async function importCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals, help } = parse(
    argv,
    {
      tolerance: { type: "string" },
      "max-abs-error": { type: "string" },
      codec: { type: "string" },
      "max-rank": { type: "string" },
      concurrency: { type: "string" },
      batch: { type: "string" },
      json: { type: "boolean" },
    },
    { min: 2, max: 2, names: "NS DIR" },
  );
  if (help) {
    io.out(IMPORT_HELP + "\n");
    return 0;
  }
  const [ns, dir] = positionals as [string, string];
  checkName("namespace", ns);
  const { tolerance, max_abs_error: maxAbs, codec, max_rank: maxRank } = await putFlags(values);
  const concurrency = intFlag(values.concurrency as string | undefined, "concurrency", 1, 64) ?? 4;
  const batch = intFlag(values.batch as string | undefined, "batch", 1, 1000) ?? 100;
  let st;
  try {
    st = await stat(dir);
  } catch {
    throw new UsageError(`${dir} does not exist.`);
  }
  if (!st.isDirectory()) throw new UsageError(`${dir} is not a directory.`);
  const files = await findNpyFiles(dir);
  // an import may outrun the tenant's rate limit: wait for the window (Retry-After) instead of failing files
  // files are compressed here (batch > 1); what is not compressible goes as it is
  const client = dataClient(io, true, undefined, batch === 1);
  try {
    const progress = new Progress({
      write: io.err,
      isTTY: io.errIsTTY,
      totalItems: files.length,
      totalBytes: files.reduce((a, f) => a + f.size, 0),
      columns: process.stderr.columns || 100,
    });
    const local = { tolerance, max_abs_error: maxAbs, codec, max_rank: maxRank };
    // answers another program than svc's gateway gives fail their files with one sentence
    const stored = { verdict: "string", compression_ratio: "number", bytes_in: "number", bytes_stored: "number" } as const;
    const checked: Pick<SvcClient, "put" | "putPred" | "putCoresBatch"> = {
      put: async (...a) => svcAnswer(io, "a put", await client.put(...a), stored),
      putPred: async (...a) => svcAnswer(io, "a put", await client.putPred(...a), stored),
      putCoresBatch: async (...a) => svcAnswer(io, "a batch put", await client.putCoresBatch(...a), { results: "array" }, ["results", stored]),
    };
    const s = await importFiles(checked, ns, files, { ...local, concurrency, batch }, progress);
    io.out(values.json ? JSON.stringify(s, null, 2) + "\n" : formatSummary(s));
    if (s.failed > 0) throw new ReportedFailure();
    return 0;
  } finally {
    await client.close();
  }
}
