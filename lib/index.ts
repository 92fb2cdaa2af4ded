// The public surface of `svc-tensor`: what users import. Everything else is internal.

/**
 * Opens an embedded store (LMDB under `path`, or `":memory:"`).
 * @example
 * const store = await createStore({ path: "./svc-data" });
 * await store.put("default", "field/t0", data, { shape: [64, 64, 64], dtype: "float32", tolerance: 1e-4 });
 */
export { createStore, handOver, Store, TOMBSTONE_RETENTION_MS } from "./store/index.js";
export type { StoreOptions, PutData, CoreInput, PutCoresItem } from "./store/index.js";
export type * from "./store/types.js";

/**
 * A client for the hosted service with the same methods and results as a store.
 * @example
 * const store = createClient({ baseUrl: "http://127.0.0.1:8080", apiKey: process.env.SVC_API_KEY! });
 * const info = await store.get("default", "field/t0");
 */
export { createClient } from "./client.js";
export type { ClientOptions, SvcClient, LastResponse, GpuServeInfo, RemoteGpuHandle } from "./client.js";

/**
 * What a store and a client share (`Store` implements it, `SvcClient` extends it): type code
 * against it, and switching between embedded and hosted is the line that makes the store.
 * @example
 * const store: TensorStore = process.env.SVC_API_KEY
 *   ? createClient({ baseUrl: "http://127.0.0.1:8080", apiKey: process.env.SVC_API_KEY })
 *   : await createStore({ path: "./svc-data" });
 * await store.put("default", "field/t0", data, { shape: [64, 64, 64] });
 */
export type { TensorStore, TensorStoreGpuHandle } from "./tensor-store.js";

/**
 * The tensor-train toolkit: compression, reconstruction and inner products on cores.
 * @example
 * const t = await tt.compress(data, [128, 128, 128], { tolerance: 1e-3 });
 * const block = await tt.reconstruct(t!, { slice: [[0, 16], [0, 128], [0, 128]] });
 */
export * as tt from "./tt.js";
export type { TT, FloatArray, CompressOptions, CompressResult, RoundOptions, Backend } from "./tt.js";

/**
 * The "pred" codec: error-bounded, prediction-based compression of float arrays (docs/codecs.md).
 * @example
 * const r = await pred.compress(data, { shape: [512, 512], max_abs_error: 1e-3 });
 * const rows = await pred.decompress(r.stream, { slice: [[0, 16], [0, 512]] });
 */
export * as pred from "./pred.js";
export type { PredArray, PredDtype, PredOptions, PredResult, PredInfo } from "./pred.js";

/**
 * `.npy` files (NumPy format 1.0-3.0, C order).
 * @example
 * const { dtype, shape, data } = readNpy(await readFile("field.npy"));
 * await writeFile("out.npy", writeNpy({ dtype: "float32", shape: [4], data: new Float32Array(4) }));
 */
export { readNpy, writeNpy } from "./npy.js";
export type { NpyArray, NpyDtype } from "./npy.js";

/** Error classes; each carries the `code` word of the HTTP API. */
export {
  SvcError,
  ValidationError,
  NotFoundError,
  VersionConflictError,
  ConflictError,
  UnauthorizedError,
  ForbiddenError,
  RateLimitedError,
  QuotaExhaustedError,
  EngineUnreachableError,
  GpuUnavailableError,
  PayloadTooLargeError,
  UnsupportedMediaTypeError,
  OverloadedError,
  IdempotencyKeyReusedError,
  InternalError,
} from "./errors.js";
export type { ErrorCode } from "./errors.js";

/** Shared names and dtypes. */
export { DTYPES, itemsize } from "./fields.js";
export type { Dtype } from "./fields.js";
export type { Clock } from "./clock.js";
export { FakeClock } from "./clock.js";
