// Audit log (api.md step 9): one JSON object per line with exactly the seed's fields, appended
// before the response is sent. No fsync per record: the write reaches the kernel (it survives a
// crash of the gateway process, not a power loss); an fsync per request would cost a disk
// flush on every call. The file is opened once in append mode (O_APPEND), so concurrent
// gateways on one host may share it: each record is one write(2).
import { mkdir, open, type FileHandle } from "node:fs/promises";
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
}

/** Serialises a record with the seed's fields in the seed's order and nothing else. */
export function auditLine(r: AuditRecord): string {
  return JSON.stringify({
    ts: r.ts, tenant_id: r.tenant_id, method: r.method, path: r.path, namespace: r.namespace,
    status: r.status, cus: r.cus, latency_ms: r.latency_ms, request_id: r.request_id,
  }) + "\n";
}

export class FileAuditSink implements AuditSink {
  private constructor(private readonly fh: FileHandle) {}
  static async open(path: string): Promise<FileAuditSink> {
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    return new FileAuditSink(await open(path, "a", 0o600));
  }
  async write(rec: AuditRecord): Promise<void> {
    await this.fh.write(auditLine(rec));
  }
  async close(): Promise<void> {
    await this.fh.close();
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
