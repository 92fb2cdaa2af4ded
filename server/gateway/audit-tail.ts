// Reading the audit log back for GET /gate/admin/audit: the newest records first, filtered by
// tenant and status. The file is read backwards in fixed-size chunks with asynchronous reads, so a
// large log neither fills memory nor holds the event loop; the scan stops at `limit` matches or
// after `maxScanBytes` from the end, and the answer says whether it reached the start of the log.
import { open } from "node:fs/promises";
import { z } from "zod";
import { tenantIdSchema } from "../../lib/fields.js";
import type { AuditRecord } from "./audit.js";

export const AUDIT_TAIL_MAX_LIMIT = 1000;
/** How far back from the end of the log one request reads at most (64 MiB: about 300,000 records). */
export const AUDIT_TAIL_SCAN_BYTES = 64 * 1024 * 1024;
const CHUNK = 256 * 1024;

export const auditTailQuerySchema = z.strictObject({
  tenant_id: tenantIdSchema.optional(),
  status: z
    .string()
    .regex(/^[1-5][0-9][0-9]$/, "status must be an HTTP status code of three digits (100-599).")
    .transform(Number)
    .optional(),
  limit: z
    .string()
    .regex(/^[0-9]{1,4}$/, `limit must be a whole number from 1 to ${AUDIT_TAIL_MAX_LIMIT}.`)
    .transform(Number)
    .refine((n) => n >= 1 && n <= AUDIT_TAIL_MAX_LIMIT, `limit must be a whole number from 1 to ${AUDIT_TAIL_MAX_LIMIT}.`)
    .default(100),
});
export type AuditTailQuery = z.output<typeof auditTailQuerySchema>;

export interface AuditTail {
  records: AuditRecord[];
  /** True when every record of the log was looked at (the scan reached its start). */
  complete: boolean;
  scanned_bytes: number;
}

/** Reads the log's tail; null when the audit log is disabled. */
export type AuditTailReader = (q: AuditTailQuery) => Promise<AuditTail | null>;

function matches(r: AuditRecord, q: AuditTailQuery): boolean {
  return (q.tenant_id === undefined || r.tenant_id === q.tenant_id) && (q.status === undefined || r.status === q.status);
}

/** A record parsed from one line of the log; null for a line that is not one (a torn last line). */
function parseLine(line: string): AuditRecord | null {
  try {
    const v = JSON.parse(line) as AuditRecord;
    return v && typeof v === "object" && typeof v.ts === "string" && typeof v.status === "number" ? v : null;
  } catch {
    return null;
  }
}

/** The tail of the JSON-lines audit log at `path`. A log that does not exist yet is empty. */
export function fileAuditTail(path: string, maxScanBytes = AUDIT_TAIL_SCAN_BYTES): AuditTailReader {
  return async (q) => {
    let fh;
    try {
      fh = await open(path, "r");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return { records: [], complete: true, scanned_bytes: 0 };
      throw e;
    }
    try {
      const size = (await fh.stat()).size;
      const floor = Math.max(0, size - maxScanBytes);
      const records: AuditRecord[] = [];
      let pos = size;
      let carry = Buffer.alloc(0); // the start of a line whose beginning lies in an earlier chunk
      const buf = Buffer.allocUnsafe(CHUNK);
      while (pos > floor && records.length < q.limit) {
        const n = Math.min(CHUNK, pos - floor);
        pos -= n;
        const { bytesRead } = await fh.read(buf, 0, n, pos);
        let block = Buffer.concat([buf.subarray(0, bytesRead), carry]);
        let end = block.length;
        // Lines are complete from the last newline backwards; what precedes the first newline is
        // carried into the next (earlier) chunk, unless the start of the scanned range is reached.
        for (let i = block.length - 1; i >= 0 && records.length < q.limit; i--) {
          if (block[i] !== 0x0a) continue;
          const r = i + 1 < end ? parseLine(block.toString("utf8", i + 1, end)) : null;
          if (r && matches(r, q)) records.push(r);
          end = i;
        }
        carry = block.subarray(0, end);
        if (pos === 0 && records.length < q.limit && carry.length) {
          const r = parseLine(carry.toString("utf8"));
          if (r && matches(r, q)) records.push(r);
          carry = Buffer.alloc(0);
        }
        block = Buffer.alloc(0);
      }
      return { records, complete: pos === 0 && records.length < q.limit, scanned_bytes: size - pos };
    } finally {
      await fh.close();
    }
  };
}

/** The tail of records kept in memory (tests, and the memory audit sink). */
export function memoryAuditTail(records: readonly AuditRecord[]): AuditTailReader {
  return async (q) => {
    const out: AuditRecord[] = [];
    for (let i = records.length - 1; i >= 0 && out.length < q.limit; i--) if (matches(records[i]!, q)) out.push(records[i]!);
    return { records: out, complete: out.length < q.limit, scanned_bytes: 0 };
  };
}
