// The stored form of heads and version records (docs/store.md "Storage layout"): the record
// itself, except that the payload hash is kept as its 32 bytes rather than 64 hex
// characters, a TT layout leaves out the modes and ranks that the fingerprint already holds,
// and a version record leaves out compression_ratio (always bytes_in / bytes_stored): a 64³
// TT head 165 -> 118 bytes, its version record 180 -> 124, in pages that B-tree inserts
// leave a third to a half empty.
// Records written before this form (hex hash, full layout, with the ratio) read unchanged.
import type { Fingerprint, HeadRecord, PayloadLayout, VersionRecord } from "./types.js";

type Rec = { fingerprint: Fingerprint; layout: PayloadLayout; compression_ratio?: number; bytes_in?: number; bytes_stored?: number };

const HEX64 = /^[0-9a-f]{64}$/;
const same = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((x, i) => x === b[i]);

/** The stored form of a head or version record (a new object; `r` is not changed). */
export function packRecord(r: HeadRecord | VersionRecord): unknown {
  const fp = r.fingerprint;
  const out: Record<string, unknown> = { ...r };
  out.fingerprint = { ...fp, sha256: HEX64.test(fp.sha256) ? Buffer.from(fp.sha256, "hex") : fp.sha256 };
  const l = r.layout;
  if (l.codec === "tt" && fp.tt && same(fp.tt.modes, l.modes) && same(fp.tt.ranks, l.ranks)) out.layout = { codec: "tt", core_dtype: l.core_dtype };
  if ("compression_ratio" in r && r.compression_ratio === r.bytes_in / r.bytes_stored) delete out.compression_ratio;
  return out;
}

/** A record as the store uses it, from either stored form (the decoded value is completed in place). */
export function unpackRecord<T extends HeadRecord | VersionRecord>(stored: unknown): T | undefined {
  if (stored === undefined || stored === null) return undefined;
  const r = stored as Rec;
  const fp = r.fingerprint as Omit<Fingerprint, "sha256"> & { sha256: string | Uint8Array };
  const h = fp.sha256;
  if (typeof h !== "string") fp.sha256 = (Buffer.isBuffer(h) ? h : Buffer.from(h.buffer, h.byteOffset, h.byteLength)).toString("hex");
  const l = r.layout as { codec: string; modes?: number[]; ranks?: number[] };
  if (l.codec === "tt" && l.modes === undefined && fp.tt) {
    l.modes = fp.tt.modes.slice();
    l.ranks = fp.tt.ranks.slice();
  }
  if (r.bytes_in !== undefined && r.compression_ratio === undefined) r.compression_ratio = r.bytes_in / r.bytes_stored!;
  return stored as T;
}
