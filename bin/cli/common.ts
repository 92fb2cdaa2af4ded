// What every `svc` subcommand shares: the I/O it writes to (injectable so tests can run
// commands in-process), usage errors (exit 2) versus failures of the work (exit 1), argument
// parsing on node:util parseArgs, and number formatting.
import { parseArgs } from "node:util";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { EngineUnreachableError, SvcError } from "../../lib/errors.js";

export interface Io {
  out(text: string): void;
  err(text: string): void;
  env: NodeJS.ProcessEnv;
  /** Whether standard error is a terminal (progress bars redraw in place only then). */
  errIsTTY: boolean;
  /** Whether standard output is a terminal (`svc serve -o -` will not write binary there). */
  outIsTTY?: boolean;
  /** Resolves when the user asks the program to stop (SIGINT/SIGTERM); `svc up` waits on it. */
  stopSignal?: Promise<string>;
  /**
   * Writes bytes to standard output (`svc serve -o -`); resolves to false when the reader closed
   * the pipe before the end (EPIPE), which is not an error. Text through `out` when absent.
   */
  outBytes?(data: Uint8Array): Promise<boolean>;
}

/** Bytes to process.stdout: true once written, false when the reader has gone (EPIPE). */
function writeStdout(data: Uint8Array): Promise<boolean> {
  return new Promise((res, rej) => {
    // the stream also emits the failure as an event: without a listener EPIPE would crash
    process.stdout.on("error", (e: NodeJS.ErrnoException) => {
      if (e.code === "EPIPE") res(false);
      else rej(e);
    });
    process.stdout.write(data, (e) => {
      if (!e) res(true);
      else if ((e as NodeJS.ErrnoException).code === "EPIPE") res(false);
      else rej(e);
    });
  });
}

export function processIo(): Io {
  return {
    out: (s) => process.stdout.write(s),
    err: (s) => process.stderr.write(s),
    env: process.env,
    errIsTTY: Boolean(process.stderr.isTTY),
    outIsTTY: Boolean(process.stdout.isTTY),
    outBytes: writeStdout,
  };
}

/** A mistake in how the program was called: exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** A failure of the work that was already reported (exit code 1, nothing more printed). */
export class ReportedFailure extends Error {
  constructor(message = "failed") {
    super(message);
    this.name = "ReportedFailure";
  }
}

export type OptionSpec = Record<string, { type: "string" | "boolean"; multiple?: boolean; short?: string }>;
export type Values = Record<string, string | boolean | string[] | undefined>;

/** parseArgs whose errors are UsageErrors phrased as one sentence. */
export function parse(
  argv: string[],
  options: OptionSpec,
  positionals: { min: number; max: number; names: string },
): { values: Values; positionals: string[]; help: boolean } {
  let r: { values: Values; positionals: string[] };
  // a value that starts with '-' followed by a digit, '.' or ':' (`--slice -1,:,:`, `--tolerance -1`)
  // belongs to the option before it: parseArgs would take it for an option and refuse it as ambiguous
  const shortOf = new Map(
    Object.entries(options)
      .filter(([, o]) => o.short)
      .map(([n, o]) => [`-${o.short}`, n]),
  );
  argv = argv.flatMap((a, i) => {
    const name = a.startsWith("--") ? a.slice(2) : shortOf.get(a);
    const next = argv[i + 1];
    if (name !== undefined && options[name]?.type === "string" && next !== undefined && /^-[\d.:]/.test(next)) return [`--${name}=${next}`];
    if (i > 0 && /^-[\d.:]/.test(a)) {
      const prev = argv[i - 1]!;
      const pn = prev.startsWith("--") ? prev.slice(2) : shortOf.get(prev);
      if (pn !== undefined && options[pn]?.type === "string") return [];
    }
    return [a];
  });
  try {
    r = parseArgs({ args: argv, options: { ...options, help: { type: "boolean", short: "h" } }, allowPositionals: true, strict: true, tokens: true }) as {
      values: Values;
      positionals: string[];
      tokens: Array<{ kind: string; name?: string; rawName?: string }>;
    };
  } catch (e) {
    const m = (e as Error).message.split("\n")[0]!.replace(/\. To specify a positional argument.*$/, "");
    throw new UsageError(m.endsWith(".") ? m : `${m}.`);
  }
  const help = Boolean(r.values.help);
  if (!help) {
    // an option that takes one value, given twice, would keep the last one silently
    const seen = new Set<string>();
    for (const tok of (r as { tokens?: Array<{ kind: string; name?: string; rawName?: string; value?: string; inlineValue?: boolean }> }).tokens ?? []) {
      // `-o=x.npy`: a short option takes what follows it as its value, '=' included
      if (tok.kind === "option" && tok.inlineValue && tok.rawName?.length === 2 && tok.value?.startsWith("="))
        throw new UsageError(`${tok.rawName} takes its value after a space (${tok.rawName} ${tok.value.slice(1) || "VALUE"}), not after '='.`);
      if (tok.kind !== "option" || tok.name === undefined || options[tok.name] === undefined || options[tok.name]!.multiple) continue;
      if (seen.has(tok.name)) throw new UsageError(`${tok.rawName ?? `--${tok.name}`} is given more than once; give it once.`);
      seen.add(tok.name);
    }
    const n = r.positionals.length;
    if (n < positionals.min) throw new UsageError(`Missing argument: expected ${positionals.names}.`);
    if (n > positionals.max) throw new UsageError(`Unexpected argument '${r.positionals[positionals.max]}'.`);
  }
  return { values: r.values, positionals: r.positionals, help };
}

/** Converts anything thrown by a command into its exit code and a one-sentence stderr line. */
export function reportError(e: unknown, io: Io, usageHint: string): number {
  const debug = (io.env.SVC_ENGINE_LOG_LEVEL ?? "").toLowerCase() === "debug";
  if (e instanceof UsageError) {
    io.err(`svc: ${e.message}\n${usageHint}\n`);
    return 2;
  }
  if (e instanceof ReportedFailure) return 1;
  const transport = transportSentence(e, io);
  if (transport !== null) {
    io.err(`svc: ${transport}\n`);
  } else if (e instanceof SvcError) {
    const rid = (e.extra.request_id as string | undefined) ?? undefined;
    io.err(`svc: ${e.message.trim().split("\n")[0]}${rid ? ` (request ${rid})` : ""}\n`);
  } else if ((e as { variable?: string })?.variable !== undefined || (e as Error)?.name === "ConfigError") {
    io.err(`svc: ${(e as Error).message}\n`);
  } else if (e instanceof Error && (e as NodeJS.ErrnoException).code && (e as NodeJS.ErrnoException).syscall) {
    const ne = e as NodeJS.ErrnoException;
    io.err(`svc: ${describeErrno(ne)}\n`);
  } else {
    io.err(`svc: ${e instanceof Error ? e.message.split("\n")[0] : String(e)}\n`);
  }
  if (debug && e instanceof Error && e.stack) io.err(`${e.stack}\n`);
  return 1;
}

const UNTRUSTED = new Set([
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "CERT_UNTRUSTED",
  "CERT_SIGNATURE_FAILURE",
]);

/**
 * The sentence, with its way out, of a failure to talk to the gateway at all: the client's
 * "The service at URL could not be reached (CODE)." (and the admin commands' "The gateway at
 * URL …"), or the raw OpenSSL text the client passes on for a TLS protocol error (EPROTO, no
 * URL: SVC_GATE_URL's). Null for anything else.
 */
export function transportSentence(e: unknown, io: Io): string | null {
  if (!(e instanceof SvcError)) return null;
  let url: string;
  let code: string;
  let detail = "";
  const reached = /^The (?:service|gateway) at (\S+) could not be reached \(([A-Z0-9_]+)\)\.$/.exec(e.message);
  if (reached) [, url, code] = reached as unknown as [string, string, string];
  else if (e.code === "internal" && /\bEPROTO\b|SSL routines/.test(e.message)) {
    url = (io.env.SVC_GATE_URL || "http://127.0.0.1:8080").replace(/\/+$/, "");
    code = "EPROTO";
    // "…:error:0A00010B:SSL routines:ssl3_get_record:wrong version number:…" → "wrong version number"
    detail = /SSL routines:[^:]*:([^:]+)/.exec(e.message)?.[1]?.trim() ?? "";
  } else return null;
  let host = url;
  try {
    host = new URL(url).hostname;
  } catch {
    /* the URL as given */
  }
  const https = url.startsWith("https:");
  switch (code) {
    case "ECONNREFUSED":
      return `Nothing answers at ${url} (connection refused): is \`svc up\` running at ${url}? (SVC_GATE_URL sets another address.)`;
    case "EPROTO":
    case "ERR_SSL_WRONG_VERSION_NUMBER":
      if (https && (detail === "" || /wrong version number|packet length too long|http request/i.test(detail)))
        return `The server at ${url} does not answer in TLS${detail ? ` (${detail})` : ""}: if it serves plain http, set SVC_GATE_URL to ${url.replace(/^https:/, "http:")}.`;
      return `The TLS handshake with ${url} failed${detail ? ` (${detail})` : ""}: check that SVC_GATE_URL is the gateway's https address.`;
    case "ERR_TLS_CERT_ALTNAME_INVALID":
      return `The TLS certificate of ${url} does not name ${host} (ERR_TLS_CERT_ALTNAME_INVALID): use in SVC_GATE_URL a host name that the certificate names.`;
    case "CERT_HAS_EXPIRED":
    case "CERT_NOT_YET_VALID":
      return `The TLS certificate of ${url} is out of its validity dates (${code}): the server needs a current certificate.`;
    case "ECONNRESET":
      return `The server at ${url} closed the connection without an answer (ECONNRESET): ${https ? "check that the gateway runs there" : `if it serves https, set SVC_GATE_URL to ${url.replace(/^http:/, "https:")}`}.`;
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return `No host named ${host} was found (${code}): check the address in SVC_GATE_URL.`;
    default:
      if (UNTRUSTED.has(code))
        return `The TLS certificate of ${url} is not trusted (${code}): set NODE_EXTRA_CA_CERTS to the PEM file of the CA that signed it (of the certificate itself when it is self-signed).`;
      return null;
  }
}

function describeErrno(e: NodeJS.ErrnoException): string {
  const p = e.path ? ` ${e.path}` : "";
  switch (e.code) {
    case "ENOENT":
      return `No such file or directory:${p}.`;
    case "EACCES":
    case "EPERM":
      return `Permission denied:${p}.`;
    case "EISDIR":
      return e.path ? `${e.path} is a directory, not a file ('svc import NS DIR' uploads every .npy file under a directory).` : "Is a directory.";
    case "ENOTDIR":
      return `Not a directory:${p}.`;
    case "EROFS": {
      // a link's error names its target as path and the link as dest
      const dest = (e as { dest?: string }).dest;
      return `Read-only file system: ${dest ?? e.path ?? "a file"} cannot be written; remount it read-write, or use a directory on another file system.`;
    }
    case "EADDRINUSE": {
      const port = (e as { port?: number }).port;
      return `Port ${port ?? "?"} is already in use, perhaps by a 'svc up' still running (stop it with Ctrl-C), or choose another port with --port and --engine-port (0 picks a free one).`;
    }
    default:
      return `${e.syscall} failed (${e.code})${p ? ` for${p}` : ""}.`;
  }
}

/**
 * The most `svc put` reads from a source that is not a regular file (a pipe, /dev/stdin, a
 * device), as Node reads a regular file whole only up to this size.
 */
export const MAX_STREAM_INPUT_BYTES = 2 ** 31 - 1;

/**
 * FILE's bytes; `-` is standard input. A regular file is read whole (Node refuses one past
 * 2 GiB with a sentence); errors name the file (Node's EISDIR carries no path). Anything else
 * is read to its end but never past `limit` bytes (default MAX_STREAM_INPUT_BYTES): a source
 * that sends more is refused with `tooMuch(limit)`, so that /dev/zero or an endless pipe cannot
 * fill the memory. Standard input that is a terminal is refused rather than waited on.
 */
export async function readInput(file: string, limit = MAX_STREAM_INPUT_BYTES, tooMuch?: (limit: number) => string): Promise<Buffer> {
  if (file === "-") {
    if (process.stdin.isTTY) throw new UsageError("Standard input is a terminal: pipe the data in (... | svc put NS KEY -) or name a file.");
    return readWithin(process.stdin, limit, () => tooMuch?.(limit) ?? `Standard input ${SENT_TOO_MUCH(limit)}`);
  }
  const { open } = await import("node:fs/promises");
  let fh: Awaited<ReturnType<typeof open>> | undefined;
  try {
    fh = await open(file, "r");
    if ((await fh.stat()).isFile()) return await fh.readFile();
    const stream = fh.createReadStream({ highWaterMark: 1024 * 1024, autoClose: false });
    return await readWithin(stream, limit, () => tooMuch?.(limit) ?? `${file} is not a regular file and ${SENT_TOO_MUCH(limit)}`);
  } catch (e) {
    const ne = e as NodeJS.ErrnoException;
    if (ne.code && ne.path === undefined) ne.path = file;
    throw e;
  } finally {
    await fh?.close();
  }
}

const SENT_TOO_MUCH = (limit: number) => `sent more than ${limit} bytes, the most svc put reads from a pipe or device; nothing was sent.`;

/** A stream's bytes to its end; past `limit` it is destroyed and a UsageError says `tooMuch()`. */
async function readWithin(source: NodeJS.ReadableStream & { destroy(): void }, limit: number, tooMuch: () => string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of source as AsyncIterable<Buffer>) {
    total += chunk.length;
    if (total > limit) {
      source.destroy();
      throw new UsageError(tooMuch());
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, total);
}

/**
 * One JSON call to the gateway by an admin command (30 s without an answer is a failure): its
 * status and body text; a transport failure is EngineUnreachableError naming the address.
 */
export async function gatewayCall(
  base: string,
  path: string,
  method: "GET" | "POST",
  headers: Record<string, string>,
  body?: string,
): Promise<{ status: number; text: string }> {
  const { exchange, HttpPool } = await import("../../lib/client-http.js");
  const pool = new HttpPool();
  try {
    const res = await exchange(pool, new URL(base + path), { method, headers, body, timeoutMs: 30_000 });
    return { status: res.status, text: res.body.toString("utf8") };
  } catch (e) {
    const code = (e as { code?: string }).code;
    throw new EngineUnreachableError(`The gateway at ${base} could not be reached${code ? ` (${code})` : ""}.`);
  } finally {
    pool.close();
  }
}

/** The gateway address of admin and data commands. */
export function gatewayUrl(io: Io): string {
  const u = io.env.SVC_GATE_URL || "http://127.0.0.1:8080";
  try {
    const p = new URL(u);
    if (p.protocol !== "http:" && p.protocol !== "https:") throw new Error();
  } catch {
    throw new UsageError(`SVC_GATE_URL ${shown(u)} is not an http(s) URL.`);
  }
  return u.replace(/\/+$/, "");
}

/**
 * `key` as it goes into a request header: svc's keys are printable ASCII, and anything else (a
 * non-ASCII or control character, often from a copy and paste) is a usage error naming `where`
 * (the variable or file it came from), never Node's "Invalid character in header content".
 */
export function headerKey(key: string, where: string, wayOut: string): string {
  if (!/^[\x20-\x7e]+$/.test(key)) throw new UsageError(`${where} holds a character that no svc key has (non-ASCII or a control character): ${wayOut}.`);
  return key;
}

/** The tenant key of data commands and `svc usage --mine`: SVC_API_KEY, set and sendable. */
export function apiKeyOf(io: Io): string {
  const k = io.env.SVC_API_KEY;
  if (!k) throw new UsageError("SVC_API_KEY is not set: export the tenant API key printed by 'svc tenant create'.");
  return headerKey(k, "SVC_API_KEY", "export the tenant key as 'svc tenant create' or 'svc key create' printed it (SVC_API_KEY=svc_live_…)");
}

/** The service key: SVC_GATE_ENGINE_SERVICE_KEY, else DIR/service.key of `svc up`. */
export function serviceKey(io: Io, dataDir: string | undefined): string {
  const env = io.env.SVC_GATE_ENGINE_SERVICE_KEY;
  const printed = "set it to the key 'svc up' printed (SVC_GATE_ENGINE_SERVICE_KEY=…) or to the content of its service.key";
  if (env) return headerKey(env, "SVC_GATE_ENGINE_SERVICE_KEY", printed);
  const dir = dataDir ?? "./svc-data";
  const file = join(dir, "service.key");
  let k = "";
  try {
    k = readFileSync(file, "utf8").trim();
  } catch {
    /* fall through */
  }
  if (k) return headerKey(k, file, "it is not a key written by 'svc up'; set SVC_GATE_ENGINE_SERVICE_KEY instead");
  throw new UsageError(`No service key: set SVC_GATE_ENGINE_SERVICE_KEY or run 'svc up' so that ${file} exists (or pass --data DIR).`);
}

const UNITS = ["B", "kB", "MB", "GB", "TB"];
/**
 * `text`, a value as a message shows it (quoted: `of` is the length of the value inside): for a
 * value past 80 characters, its first 60 characters and that length, so that one argument cannot
 * flood the terminal.
 */
export function clipped(text: string, of = text.length): string {
  return of > 80 ? `${text.slice(0, 60)}... (${of} characters)` : text;
}

/** A value the user typed, in single quotes for a message (clipped). */
export const shown = (v: string): string => clipped(`'${v}'`, v.length);

/** Decimal byte count, 3 significant digits: 1234567 → "1.23 MB". */
export function fmtBytes(n: number): string {
  let i = 0;
  let v = n;
  while (v >= 1000 && i < UNITS.length - 1) {
    v /= 1000;
    i++;
  }
  return i === 0 ? `${n} B` : `${v.toPrecision(3)} ${UNITS[i]}`;
}

/** Seconds as "42s", "3m05s", "1h02m". */
export function fmtDuration(s: number): string {
  if (!Number.isFinite(s) || s < 0) return "?";
  const t = Math.round(s);
  if (t < 60) return `${t}s`;
  if (t < 3600) return `${Math.floor(t / 60)}m${String(t % 60).padStart(2, "0")}s`;
  return `${Math.floor(t / 3600)}h${String(Math.floor((t % 3600) / 60)).padStart(2, "0")}m`;
}

/** Prints rows as aligned columns. */
export function table(rows: string[][]): string {
  const w: number[] = [];
  for (const r of rows)
    r.forEach((c, i) => {
      w[i] = Math.max(w[i] ?? 0, c.length);
    });
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(w[i]!))).join("  ")).join("\n") + "\n";
}

/** A whole number option value, or a usage error naming the flag. */
export function intFlag(v: string | undefined, flag: string, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max) throw new UsageError(`--${flag} must be a whole number between ${min} and ${max}.`);
  return Number(v);
}

export function numFlag(v: string | undefined, flag: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n)) throw new UsageError(`--${flag} must be a number.`);
  return n;
}
