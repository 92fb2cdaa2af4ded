// The only module that loads the native addon (build/Release/svc_tensor.node under the package
// root). It declares the addon's surface as one interface; lib/tt.ts validates before calling it.
import { createRequire } from "node:module";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { GpuUnavailableError, InternalError, SvcError, ValidationError } from "./errors.js";

export type NativeArray = Float32Array | Float64Array;

/** What the native TT-SVD returns; null from compress means min_ratio was unreachable. */
export interface NativeTTResult {
  ranks: number[];
  cores: NativeArray[];
  relative_error: number;
}

export interface NativeBackend {
  isa: string;
  isa_note: string | null;
  threads: number;
  cuda_compiled: boolean;
  cuda_device: string | null;
  reason: string | null;
}

/** The addon's functions. Arguments are already validated and defaulted by lib/tt.ts. */
export interface NativeAddon {
  backend(): NativeBackend;
  /** Order-0 entropy of the bytes in bits per byte, and the share of positions whose next 4 bytes occurred before. */
  byteStats(bytes: Uint8Array): { bits: number; repeated: number };
  compress(data: NativeArray, modes: number[], tolerance: number, maxRank: number, minRatio: number): Promise<NativeTTResult | null>;
  reconstruct(cores: NativeArray[], ranks: number[], modes: number[], shape: number[], groups: number[], slice: number[] | null): Promise<NativeArray>;
  // The inner products come scaled (lib/scaled.ts): [m, e] for one, [m_0.., e_0..] for several; the value is m · 2^e.
  dot(aCores: NativeArray[], aRanks: number[], bCores: NativeArray[], bRanks: number[], modes: number[]): Promise<Float64Array>;
  dotDense(cores: NativeArray[], ranks: number[], modes: number[], x: NativeArray): Promise<Float64Array>;
  round(cores: NativeArray[], ranks: number[], modes: number[], tolerance: number, maxRank: number): Promise<NativeTTResult>;
  dotBatch(qCores: NativeArray[], qRanks: number[], cCores: NativeArray[][], cRanks: number[][], modes: number[]): Promise<Float64Array>;
  dotDenseBatch(x: NativeArray, cCores: NativeArray[][], cRanks: number[][], modes: number[]): Promise<Float64Array>;
  denseDot(a: NativeArray, b: NativeArray): Promise<Float64Array>;
  // The pred codec (native/pred.cc; lib/pred.ts wraps it). tolerance / maxAbs of -1 mean "not given".
  predCompress(
    data: NativeArray,
    shape: number[],
    tolerance: number,
    maxAbs: number,
  ): Promise<{ stream: Uint8Array; relative_error: number; max_abs_error: number }>;
  predDecompress(stream: Uint8Array, slice: number[] | null): Promise<NativeArray>;
  predEstimate(data: NativeArray, shape: number[], tolerance: number, maxAbs: number): Promise<number>;
  predInfo(stream: Uint8Array): {
    dtype: "float32" | "float64";
    shape: number[];
    block_shape: number[];
    blocks: number;
    max_abs_error: number;
    lossless: boolean;
  };
  /** Lossless coding of integer arrays by prediction (native/pred_int.cc); dtype codes 1 int8 .. 8 uint64 (lib/store/codec.ts). */
  intEncode(data: Uint8Array, dtype: number, shape: number[]): Promise<Uint8Array>;
  /** The values' bytes of a stream made for (dtype, shape); a stream that is not one is refused (code bad_request). */
  intDecode(stream: Uint8Array, dtype: number, shape: number[]): Promise<Uint8Array>;
  /** ⟨decoded stream i, x⟩ (and ‖decoded − x‖ when distance) per stream, decoded block by block, scaled as [m_0.., e_0..]; rounds: 0 none, 1 float16, 2 bfloat16. */
  predDot(streams: Uint8Array[], rounds: number[], x: NativeArray, distance: boolean): Promise<{ dot: Float64Array; distance: Float64Array | null }>;
  // GPU side (native/gpu.cc; lib/gpu.ts wraps it). Without CUDA or a device every call but
  // gpuBytesFor and gpuRelease rejects or throws with code gpu_unavailable.
  gpuLoad(cores: Float32Array[], ranks: number[], modes: number[]): Promise<{ handle: number; bytes: number; h2d_s: number }>;
  gpuRelease(handle: number): boolean;
  gpuReconstruct(handle: number, shape: number[], groups: number[], slice: number[] | null): Promise<Float32Array>;
  gpuReconstructTimed(handle: number, repeats: number): Promise<number>;
  gpuDot(a: number, b: number): Promise<number>;
  gpuDotDense(handle: number, x: Float32Array): Promise<number>;
  gpuTopk(
    query: number,
    candidates: Float64Array | number[],
    norms: Float64Array | null,
    metric: string,
    k: number,
  ): Promise<{ index: Uint32Array; score: Float64Array }>;
  gpuMemory(): { free: number; total: number };
  gpuBytesFor(ranks: number[], modes: number[]): number;
}

/** The package root: the nearest directory above this file with svc-tensor's package.json. */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pj = join(dir, "package.json");
    if (existsSync(pj)) {
      try {
        if ((JSON.parse(readFileSync(pj, "utf8")) as { name?: string }).name === "svc-tensor") return dir;
      } catch {
        // not ours; keep walking up
      }
    }
    const up = dirname(dir);
    if (up === dir) throw new InternalError("Cannot find the svc-tensor package root to load the native addon.");
    dir = up;
  }
}

let addon: NativeAddon | undefined;

/** The loaded addon (loaded on first use, so importing the library never fails by itself). */
export function native(): NativeAddon {
  if (addon) return addon;
  const path = join(packageRoot(), "build", "Release", "svc_tensor.node");
  if (!existsSync(path)) {
    throw new InternalError("The native addon is not built (expected build/Release/svc_tensor.node); run `npm run build:native`.");
  }
  addon = createRequire(import.meta.url)(path) as NativeAddon;
  return addon;
}

/** Turns a native rejection (an Error with `.code` and `.field`) into the library's error classes.
 *  The addon raises bad_request, internal, gpu_unavailable and out_of_memory (device memory;
 *  lib/gpu.ts maps it with the byte count where it knows it); anything else, including errors
 *  without a code (N-API type errors), becomes an InternalError. */
export function fromNative(err: unknown): Error {
  if (err instanceof SvcError) return err;
  const e = (err ?? {}) as { code?: unknown; field?: unknown; message?: unknown };
  const message = typeof e.message === "string" && e.message ? e.message : String(err);
  switch (e.code) {
    case "bad_request":
      return new ValidationError(message, typeof e.field === "string" && e.field ? e.field : undefined);
    case "gpu_unavailable":
      return new GpuUnavailableError(message);
    case "out_of_memory":
      return new InternalError(`Out of device memory: ${message}`);
    default:
      return new InternalError(message);
  }
}

/** Awaits a native promise, rewrapping its errors. */
export async function call<T>(p: () => Promise<T>): Promise<T> {
  try {
    return await p();
  } catch (err) {
    throw fromNative(err);
  }
}
