// Result and record types of the embedded store. Field names are the HTTP API's
// (docs/api.md (data plane)) so one type describes both the library and the wire.
import type { Dtype } from "../fields.js";
import type { Metric } from "../schemas.js";

export type Verdict = "compressed" | "weak" | "lossless" | "passthrough";
/** How a payload is stored: TT cores, the prediction codec's stream, deflate, or the bytes as they are. */
export type Codec = "tt" | "pred" | "lossless" | "raw";

export interface TtInfo {
  modes: number[];
  ranks: number[];
}

export interface Fingerprint {
  /** Hex SHA-256 of the stored payload bytes. */
  sha256: string;
  codec: Codec;
  tt: TtInfo | null;
  /** Frobenius norm of the stored tensor (null for `bytes`). */
  norm: number | null;
}

export interface PutResult {
  namespace: string;
  key: string;
  version: number;
  verdict: Verdict;
  compressed: boolean;
  compression_ratio: number;
  relative_error: number;
  /** Measured largest |A_i - Â_i| over the served values (0 for lossless and passthrough). */
  max_abs_error: number;
  dtype: Dtype;
  shape: number[];
  tt: TtInfo | null;
  bytes_in: number;
  bytes_stored: number;
  fingerprint: Fingerprint;
}

export interface EntryInfo {
  namespace: string;
  key: string;
  version: number;
  latest_version: number;
  versions: number[];
  created_at: string;
  dtype: Dtype;
  shape: number[];
  metadata: Record<string, unknown>;
  verdict: Verdict;
  compressed: boolean;
  compression_ratio: number;
  relative_error: number;
  /** Measured largest |A_i - Â_i|; null for an entry stored before it was measured. */
  max_abs_error: number | null;
  bytes_in: number;
  bytes_stored: number;
  fingerprint: Fingerprint;
}

export interface DeleteResult {
  namespace: string;
  key: string;
  deleted: true;
  version: number;
  purge_after: string;
}

export interface ListItem {
  key: string;
  version: number;
  updated_at: string;
  dtype: Dtype;
  shape: number[];
  verdict: Verdict;
  /** The codec of the latest version's payload. */
  codec: Codec;
  /** Measured errors of the latest version; null for an entry stored before they were kept with it. */
  relative_error: number | null;
  max_abs_error: number | null;
}
export interface ListResult {
  namespace: string;
  keys: ListItem[];
  total: number;
  limit: number;
  offset: number;
  next_offset: number | null;
}

export interface SearchResult {
  namespace: string;
  results: { key: string; version: number; metadata: Record<string, unknown> }[];
  total: number;
  limit: number;
  offset: number;
  next_offset: number | null;
}

export type ServeArray =
  Float32Array | Float64Array | Int8Array | Uint8Array | Int16Array | Uint16Array | Int32Array | Uint32Array | BigInt64Array | BigUint64Array;

export interface ServeResult {
  namespace: string;
  key: string;
  version: number;
  /** float16 and bfloat16 come back as Uint16Array of their bit patterns; bool and bytes as Uint8Array. */
  data: ServeArray;
  dtype: Dtype;
  shape: number[];
}

export interface SimilarityResult {
  metric: Metric;
  score: number;
  a: { key: string; version: number };
  b: { key: string; version: number };
}

export interface TopkResult {
  metric: Metric;
  results: { key: string; version: number; score: number }[];
  scanned: number;
  skipped: number;
}

export interface CompactResult {
  /** Version records removed (expired tombstones). */
  versions_purged: number;
  /** Keys removed entirely (deleted and fully expired). */
  keys_purged: number;
  /** Payloads no version referenced any more. */
  payloads_purged: number;
}

// ---- stored records ----

/** One version of an entry, as stored (the payload lives apart, under `fingerprint.sha256`). */
export interface VersionRecord {
  version: number;
  created_at: number;
  dtype: Dtype;
  shape: number[];
  metadata: Record<string, unknown>;
  verdict: Verdict;
  compression_ratio: number;
  relative_error: number;
  /** Absent in records written before it was measured. */
  max_abs_error?: number;
  bytes_in: number;
  bytes_stored: number;
  fingerprint: Fingerprint;
  /** Codec details needed to decode the payload. */
  layout: PayloadLayout;
}

export type PayloadLayout =
  | { codec: "tt"; core_dtype: "float32" | "float64"; modes: number[]; ranks: number[] }
  | { codec: "pred"; lossless: boolean } /* the stream's own header holds its dtype, shape and blocks */
  | { codec: "lossless"; shuffle: number /* byte-shuffle width, 1 = none */; coding?: "intpred" /* absent: shuffle + deflate */ }
  | { codec: "raw" };

/** The per-key head: what list, search and top-K scan, and what a put checks. */
export interface HeadRecord {
  latest: number;
  /** First version of the current life (after a delete and a new put, older ones are tombstoned). */
  first_live: number;
  deleted: boolean;
  updated_at: number;
  /** Summary of the latest version, for list/search/top-K without reading version records. */
  dtype: Dtype;
  shape: number[];
  verdict: Verdict;
  /** Measured errors of the latest version (absent in heads written before they were kept). */
  relative_error?: number;
  max_abs_error?: number;
  metadata: Record<string, unknown>;
  /** Fingerprint and payload layout of the latest version: top-K scores from heads alone. */
  fingerprint: Fingerprint;
  layout: PayloadLayout;
  /** Versions from..upto are deleted; purge after `purge_after` (ms). */
  tombstones: { from: number; upto: number; purge_after: number }[];
}
