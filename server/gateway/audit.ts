// Audit log (step 9 of the order of checks, docs/api.md): one JSON object per line with exactly the documented audit fields, appended
// before the response is sent. Group commit: the records of one event-loop turn are joined and
// appended with one synchronous write(2) on a descriptor opened once with O_APPEND, and each
// request waits for the write holding its record before it answers. So a record is in the
// kernel before its response starts (it survives a crash of the gateway process), records
// never interleave (gateways on one host may share the file), and under concurrency one
// system call carries many records. No fsync per batch: that would cost a disk flush per
// request; a power loss can lose the last records the OS had not written back yet.
// Rotation: move the file away, then `reopen()` (SIGHUP to `svc gateway`): the records queued
// so far go to the old file, every later one to a new file at the configured path.
import { closeSync, openSync, writeSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { dirname } from "node:path";
import { systemCode } from "../../lib/errors.js";

export interface AuditRecord {
  ts: string;
  tenant_id: string;
  method: string;
  path: string;
  namespace: string;
  status: number;
  cus: number;
  latency_ms: number;
  request_id: string;
  /** The key the request authenticated with ("primary" for the tenant's own key); "" when none. */
  key_id?: string;
}

export interface AuditSink {
  write(rec: AuditRecord): Promise<void>;
  close(): Promise<void>;
  /** Opens the log's path again (after a rotation moved the file); a no-op where there is no file. */
  reopen?(): Promise<void>;
  /**
   * False while the last append failed (a full disk, for example): the gateway then refuses
   * requests that would change data, and the next record that is written turns it back on.
   * Sinks that cannot fail leave it undefined.
   */
  readonly writable?: boolean;
  /** While writable is false: the system error's code of the last failed append (ENOSPC, EROFS, ...), where it had one. */
  readonly failure?: string;
}

/** Raised to a request whose record could not be appended. */
export class AuditWriteError extends Error {
  constructor(readonly code: string) {
    super(`The audit log cannot be written (${code}).`);
    this.name = "AuditWriteError";
  }
}

/** writeSync's shape: what FileAuditSink appends with (injectable to simulate a full disk). */
export type AppendFn = (fd: number, buf: Buffer, offset: number) => number;

/** The longest path an audit record keeps, in characters; a longer one is cut and marked. */
export const AUDIT_MAX_PATH = 1024;
/** Every other string field is at most this long (ids and names are far shorter once validated). */
export const AUDIT_MAX_FIELD = 128;

/**
 * `s` cut to `max` characters with a marker that says how much was dropped, so that one record
 * stays small whatever the client sent (a path may be as long as the header limit allows).
 * @example clip("/v1/" + "a".repeat(2000), 1024).endsWith("...[truncated 980 characters]")
 */
export function clip(s: string, max: number): string {
  if (s.length <= max) return s;
  const cut = s.length - max;
  return `${s.slice(0, max)}...[truncated ${cut} characters]`;
}

/** Serialises a record with the seed's fields in the seed's order, then key_id (docs/api.md), each bounded. */
export function auditLine(r: AuditRecord): string {
  return (
    JSON.stringify({
      ts: clip(r.ts, AUDIT_MAX_FIELD),
      tenant_id: clip(r.tenant_id, AUDIT_MAX_FIELD),
      method: clip(r.method, AUDIT_MAX_FIELD),
      path: clip(r.path, AUDIT_MAX_PATH),
      namespace: clip(r.namespace, AUDIT_MAX_FIELD),
      status: r.status,
      cus: r.cus,
      latency_ms: r.latency_ms,
      request_id: clip(r.request_id, AUDIT_MAX_FIELD),
      key_id: clip(r.key_id ?? "", AUDIT_MAX_FIELD),
    }) + "\n"
  );
}

export class FileAuditSink implements AuditSink {
  private fd: number | null;
  private lines: string[] = [];
  private waiters: Array<{ resolve: () => void; reject: (e: Error) => void }> = [];
  private scheduled = false;
  private ok = true;
  // A write that failed part-way left a line without its newline: the next append ends it
  // first, so every later record is a line of its own (readers skip the torn one).
  private torn = false;
  private failedWith: string | undefined;
  private constructor(
    fd: number,
    private readonly path: string,
    private readonly append: AppendFn,
  ) {
    this.fd = fd;
  }
  static async open(path: string, append: AppendFn = (fd, buf, off) => writeSync(fd, buf, off)): Promise<FileAuditSink> {
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    return new FileAuditSink(openSync(path, "a", 0o600), path, append);
  }
  /**
   * Writes what is queued to the file open now, then opens the path again (created 0600 if
   * absent) and closes the old descriptor. When the path cannot be opened, the old file stays
   * in use and the error is thrown.
   */
  async reopen(): Promise<void> {
    if (this.fd === null) throw new Error("The audit log is closed.");
    if (this.lines.length) this.flush();
    await mkdir(dirname(this.path), { recursive: true, mode: 0o700 });
    const fd = openSync(this.path, "a", 0o600);
    const old = this.fd;
    this.fd = fd;
    closeSync(old);
  }
  get writable(): boolean {
    return this.ok;
  }
  get failure(): string | undefined {
    return this.ok ? undefined : this.failedWith;
  }
  write(rec: AuditRecord): Promise<void> {
    return new Promise((resolve, reject) => {
      this.lines.push(auditLine(rec));
      this.waiters.push({ resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }
  private flush(): void {
    this.scheduled = false;
    const lines = this.lines,
      waiters = this.waiters;
    this.lines = [];
    this.waiters = [];
    try {
      if (this.fd === null) throw new AuditWriteError("closed");
      const buf = Buffer.from((this.torn ? "\n" : "") + lines.join(""), "utf8");
      let off = 0;
      while (off < buf.length) off += this.append(this.fd, buf, off);
    } catch (e) {
      // Part of the batch may have reached the file even when the call reported nothing.
      this.torn = true;
      this.ok = false;
      const err = e instanceof AuditWriteError ? e : new AuditWriteError((e as NodeJS.ErrnoException).code ?? "error");
      this.failedWith = systemCode(err);
      for (const w of waiters) w.reject(err);
      return;
    }
    this.torn = false;
    this.ok = true;
    for (const w of waiters) w.resolve();
  }
  async close(): Promise<void> {
    if (this.lines.length) this.flush();
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }
}

/** Keeps records in memory (tests). */
export class MemoryAuditSink implements AuditSink {
  readonly records: AuditRecord[] = [];
  async write(rec: AuditRecord): Promise<void> {
    this.records.push(JSON.parse(auditLine(rec)) as AuditRecord);
  }
  async close(): Promise<void> {}
}

/** SVC_GATE_AUDIT_ENABLED=false. */
export class DisabledAuditSink implements AuditSink {
  async write(): Promise<void> {}
  async close(): Promise<void> {}
}
