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
}

export interface AuditSink {
  write(rec: AuditRecord): Promise<void>;
  close(): Promise<void>;
  /** Opens the log's path again (after a rotation moved the file); a no-op where there is no file. */
  reopen?(): Promise<void>;
}

/** Serialises a record with the documented audit fields, in their order, and nothing else. */
export function auditLine(r: AuditRecord): string {
  return JSON.stringify({
    ts: r.ts, tenant_id: r.tenant_id, method: r.method, path: r.path, namespace: r.namespace,
    status: r.status, cus: r.cus, latency_ms: r.latency_ms, request_id: r.request_id,
  }) + "\n";
}

export class FileAuditSink implements AuditSink {
  private fd: number | null;
  private lines: string[] = [];
  private waiters: Array<{ resolve: () => void; reject: (e: Error) => void }> = [];
  private scheduled = false;
  private constructor(fd: number, private readonly path: string) {
    this.fd = fd;
  }
  static async open(path: string): Promise<FileAuditSink> {
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    return new FileAuditSink(openSync(path, "a", 0o600), path);
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
    const lines = this.lines, waiters = this.waiters;
    this.lines = [];
    this.waiters = [];
    try {
      if (this.fd === null) throw new Error("The audit log is closed.");
      const buf = Buffer.from(lines.join(""), "utf8");
      let off = 0;
      while (off < buf.length) off += writeSync(this.fd, buf, off);
    } catch (e) {
      for (const w of waiters) w.reject(e as Error);
      return;
    }
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
