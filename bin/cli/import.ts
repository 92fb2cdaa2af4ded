// `svc import NS DIR`: every .npy file under DIR, keyed by its path relative to DIR without
// the extension (`runs/a/t0.npy` → key `runs/a/t0`). A file that fails (corrupt header, bad
// key, refused by the service) is reported and the rest go on; the exit code is 1 when any
// failed. Progress on standard error, summary on standard output.
import { readdir, readFile, stat } from "node:fs/promises";
import { join, relative, sep } from "node:path";
import { keySchema } from "../../lib/names.js";
import type { SvcClient } from "../../lib/client.js";
import type { PutResult } from "../../lib/store/index.js";
import { checkName, dataClient, isNpy, preparePut } from "./data.js";
import { Progress } from "./progress.js";
import { fmtBytes, intFlag, numFlag, parse, ReportedFailure, UsageError, type Io } from "./common.js";

export const IMPORT_HELP = `Usage: svc import NS DIR [--tolerance T] [--max-rank R] [--concurrency N] [--json]

Uploads every .npy file under DIR (recursively) to namespace NS; the key of a file is its path
relative to DIR without .npy, with / between directories. Files are selected by their .npy
name and must start with the NumPy magic bytes, as for svc put; others are reported as failed.
When the tenant's rate limit is reached the import waits for the window (Retry-After) and
says so on standard error. Shows a progress bar on a terminal
(plain lines otherwise) and ends with a summary: files, bytes in, bytes stored, ratio, verdicts
and the failures with their reasons. A failed file does not stop the others; the exit code is 1
when any failed. --concurrency (default 4) uploads that many files at once.`;

export interface ImportFile { path: string; key: string; size: number }

/** The .npy files under `dir`, sorted by key. */
export async function findNpyFiles(dir: string): Promise<ImportFile[]> {
  const out: ImportFile[] = [];
  async function walk(d: string): Promise<void> {
    const entries = await readdir(d, { withFileTypes: true });
    for (const e of entries) {
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else if (e.isFile() && e.name.toLowerCase().endsWith(".npy")) {
        const rel = relative(dir, p).split(sep).join("/");
        out.push({ path: p, key: rel.slice(0, -4), size: (await stat(p)).size });
      }
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

export async function importFiles(
  client: Pick<SvcClient, "put">, ns: string, files: ImportFile[],
  opts: { tolerance?: number; max_rank?: number; concurrency: number }, progress: Progress,
): Promise<ImportSummary> {
  const t0 = performance.now();
  const s: ImportSummary = { files: files.length, imported: 0, failed: 0, bytes_in: 0, bytes_stored: 0, ratio: null, verdicts: {}, failures: [], seconds: 0 };
  const queue = [...files];
  async function worker(): Promise<void> {
    for (let f = queue.shift(); f; f = queue.shift()) {
      let r: PutResult | undefined;
      try {
        const k = keySchema.safeParse(f.key);
        if (!k.success) throw new Error(`the key '${f.key}' derived from the path is invalid: ${k.error.issues[0]!.message}`);
        const buf = await readFile(f.path);
        // the same test as svc put: the magic bytes decide, the .npy name only selects the file
        if (!isNpy(buf)) throw new Error("named .npy but does not start with the NumPy magic bytes");
        const p = preparePut(buf, undefined, undefined, f.path);
        r = await client.put(ns, f.key, p.data, { dtype: p.dtype, shape: p.shape, tolerance: opts.tolerance, max_rank: opts.max_rank });
      } catch (e) {
        const reason = (e instanceof Error ? e.message : String(e)).replace(/\.$/, "");
        s.failed++;
        s.failures.push({ file: f.path, reason });
        progress.done(f.key, f.size, false, reason);
        continue;
      }
      s.imported++;
      s.bytes_in += r.bytes_in;
      s.bytes_stored += r.bytes_stored;
      s.verdicts[r.verdict] = (s.verdicts[r.verdict] ?? 0) + 1;
      progress.done(f.key, f.size, true, `${r.verdict}, ratio ${r.compression_ratio.toFixed(2)}`);
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(opts.concurrency, files.length)) }, worker));
  progress.finish();
  s.failures.sort((a, b) => a.file.localeCompare(b.file));
  s.ratio = s.bytes_stored > 0 ? s.bytes_in / s.bytes_stored : null;
  s.seconds = (performance.now() - t0) / 1000;
  return s;
}

export function formatSummary(s: ImportSummary): string {
  const verdicts = Object.entries(s.verdicts).sort(([a], [b]) => a.localeCompare(b)).map(([v, n]) => `${v} ${n}`).join(", ") || "none";
  let t = `Imported ${s.imported} of ${s.files} files in ${s.seconds.toFixed(1)} s: ` +
    `${fmtBytes(s.bytes_in)} in, ${fmtBytes(s.bytes_stored)} stored, ratio ${s.ratio === null ? "n/a" : s.ratio.toFixed(2)}.\n` +
    `Verdicts: ${verdicts}.\n`;
  if (s.failed) {
    t += `${s.failed} failed:\n`;
    for (const f of s.failures) t += `  ${f.file}: ${f.reason}.\n`;
  }
  return t;
}

export async function importCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals, help } = parse(argv, {
    tolerance: { type: "string" }, "max-rank": { type: "string" }, concurrency: { type: "string" }, json: { type: "boolean" },
  }, { min: 2, max: 2, names: "NS DIR" });
  if (help) { io.out(IMPORT_HELP + "\n"); return 0; }
  const [ns, dir] = positionals as [string, string];
  checkName("namespace", ns);
  const tolerance = numFlag(values.tolerance as string | undefined, "tolerance");
  const maxRank = intFlag(values["max-rank"] as string | undefined, "max-rank", 1);
  const concurrency = intFlag(values.concurrency as string | undefined, "concurrency", 1, 64) ?? 4;
  let st;
  try { st = await stat(dir); } catch { throw new UsageError(`${dir} does not exist.`); }
  if (!st.isDirectory()) throw new UsageError(`${dir} is not a directory.`);
  const files = await findNpyFiles(dir);
  // an import may outrun the tenant's rate limit: wait for the window (Retry-After) instead of failing files
  const client = dataClient(io, true);
  try {
    const progress = new Progress({
      write: io.err, isTTY: io.errIsTTY, totalItems: files.length, totalBytes: files.reduce((a, f) => a + f.size, 0),
      columns: process.stderr.columns || 100,
    });
    const s = await importFiles(client, ns, files, { tolerance, max_rank: maxRank, concurrency }, progress);
    io.out(values.json ? JSON.stringify(s, null, 2) + "\n" : formatSummary(s));
    if (s.failed > 0) throw new ReportedFailure();
    return 0;
  } finally {
    await client.close();
  }
}
