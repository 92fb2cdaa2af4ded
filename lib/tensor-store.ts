// TensorStore: the surface that a store from createStore (lib/store/index.ts, `Store`) and a
// client from createClient (lib/client.ts, `SvcClient`) share, so that code typed against it
// moves from embedded to hosted by changing the line that makes the store. `Store` implements
// it and `SvcClient` extends it, so tsc fails on either side when the two drift apart.
// Members are function-typed properties, not methods: TypeScript then compares parameters
// strictly (contravariantly) rather than bivariantly, which catches more drift.
import type {
  GetOptions,
  ListOptions,
  PutCoresOptions,
  PutPredOptions,
  PutOptions,
  SearchOptions,
  ServeOptions,
  SimilarityOptions,
  TopkOptions,
  VectorOptions,
} from "./schemas.js";
import type { CoreInput, PutCoresItem, PutData } from "./store/index.js";
import type { DeleteResult, EntryInfo, ListResult, PutResult, SearchResult, ServeResult, SimilarityResult, TopkResult, TtInfo } from "./store/types.js";

/**
 * An entry made resident on a GPU by `serveGpu`: a store's device handle, or a client's record
 * of the engine's residency (whose `reconstruct` and `dot` run as HTTP calls).
 */
export interface TensorStoreGpuHandle {
  namespace: string;
  key: string;
  version: number;
  /** `cuda:0` */
  device: string;
  resident: boolean;
  bytes_on_device: number;
  tt: TtInfo | null;
  /** The dense tensor, or a block of it, of this version. */
  reconstruct: (opts?: Omit<ServeOptions, "version">) => Promise<ServeResult>;
  /** Inner product with another entry of the same namespace. */
  dot: (other: { key: string; version?: number }) => Promise<number>;
  /** Ends the use of the handle; later calls on it fail. */
  release: () => void | Promise<void>;
}

/**
 * What a store from `createStore` and a client from `createClient` have in common: the data
 * methods, `query` and `close`, with the same options, results and error classes. Type code
 * against it and switching between embedded and hosted is the one line that makes the store.
 * Not part of it: `compact`, `forTenant` and `tenant` (in-process only), `lastResponse`
 * (HTTP only).
 * @example
 * import { createClient, createStore, type TensorStore } from "svc-tensor";
 *
 * async function ingest(store: TensorStore, data: Float32Array) {
 *   const put = await store.put("default", "field/t0", data, { shape: [64, 64, 64] });
 *   return store.query.topk("default", { key: put.key, k: 5 });
 * }
 * const store: TensorStore = process.env.SVC_API_KEY
 *   ? createClient({ baseUrl: "http://127.0.0.1:8080", apiKey: process.env.SVC_API_KEY })
 *   : await createStore({ path: "./svc-data" });
 * await ingest(store, data);
 * await store.close();
 */
export interface TensorStore {
  /** put: compresses (TT, lossless or raw, by docs/api.md (names and data types)) and adds version n+1. */
  put: (ns: string, key: string, data: PutData, opts?: PutOptions) => Promise<PutResult>;
  /** put_cores: stores a TT given by its cores. */
  putCores: (ns: string, key: string, cores: CoreInput[], opts?: PutCoresOptions) => Promise<PutResult>;
  /** put of a `pred` stream encoded by the caller (lib/pred.ts): checked, stored as it is; the errors are the caller's measurement. */
  putPred: (ns: string, key: string, stream: Uint8Array, opts: PutPredOptions) => Promise<PutResult>;
  /** put_cores_batch: all items validated first, then stored together. */
  putCoresBatch: (ns: string, items: PutCoresItem[]) => Promise<{ results: PutResult[] }>;
  /** get: metadata and fingerprint of a version (latest by default), without the payload. */
  get: (ns: string, key: string, opts?: GetOptions) => Promise<EntryInfo>;
  /** list: live keys in ascending byte order, paginated. */
  list: (ns: string, opts?: ListOptions) => Promise<ListResult>;
  /** search: live keys whose latest metadata match `filter`. */
  search: (ns: string, filter?: Record<string, unknown>, opts?: SearchOptions) => Promise<SearchResult>;
  /** delete: soft delete of the key (a tombstone kept 30 days). */
  delete: (ns: string, key: string) => Promise<DeleteResult>;
  /** serve on the CPU: the dense tensor, or a block of it, as a typed array. */
  serve: (ns: string, key: string, opts?: ServeOptions) => Promise<ServeResult>;
  /** serve on the GPU: `GpuUnavailableError` where there is no usable CUDA device. */
  serveGpu: (ns: string, key: string, opts?: GetOptions) => Promise<TensorStoreGpuHandle>;
  /** Similarity queries on the stored form. */
  readonly query: {
    readonly similarity: (ns: string, a: string, b: string, opts?: SimilarityOptions) => Promise<SimilarityResult>;
    readonly topk: (ns: string, opts: TopkOptions) => Promise<TopkResult>;
    readonly vector: (ns: string, opts: VectorOptions) => Promise<TopkResult>;
  };
  /** Flushes and closes the store, or closes the client's connections; later calls fail. */
  close: () => Promise<void>;
}
