// GPU serving over the native addon (native/gpu.cc, kernels in native/cuda/): the CUDA device
// behind the residency cache's DeviceBackend interface, and the device's status. TT cores go
// to the device as float32; every result is compared with the CPU engine in test/gpu/.
import { GpuUnavailableError } from "./errors.js";
import { fromNative, native } from "./native.js";
import { DeviceOutOfMemoryError, deviceBytesOf, gpuServing, type DeviceBackend, type GpuServing } from "./store/gpu-cache.js";
import type { TT } from "./store/ttapi.js";

export interface GpuStatus {
  /** Whether CUDA code was compiled into the addon. */
  compiled: boolean;
  /** The device found (name, compute capability, memory, runtime), or null. */
  device: string | null;
  /** Why there is no usable device, or null when there is one. */
  reason: string | null;
}

/** The CUDA build and device as the addon sees them; never throws (a missing addon is a reason). */
export function gpuStatus(): GpuStatus {
  try {
    const b = native().backend();
    return { compiled: b.cuda_compiled, device: b.cuda_device, reason: b.cuda_device ? null : (b.reason ?? "no CUDA device found") };
  } catch (e) {
    return { compiled: false, device: null, reason: `the native addon could not be loaded (${(e as Error).message})` };
  }
}

const sentence = (s: string): string => {
  const t = s.charAt(0).toUpperCase() + s.slice(1);
  return t.endsWith(".") ? t : `${t}.`;
};

/** Native GPU errors as library errors: gpu_unavailable, out_of_memory, then the TT engine's. */
function gpuError(err: unknown, bytes = 0): Error {
  const code = (err as { code?: unknown } | null)?.code;
  if (code === "gpu_unavailable") return new GpuUnavailableError(sentence((err as Error).message));
  if (code === "out_of_memory") return new DeviceOutOfMemoryError(bytes);
  return fromNative(err);
}

async function call<T>(p: () => Promise<T>, bytes = 0): Promise<T> {
  try {
    return await p();
  } catch (e) {
    throw gpuError(e, bytes);
  }
}

const f32 = (x: Float32Array | Float64Array): Float32Array => (x instanceof Float32Array ? x : Float32Array.from(x));

/** Consecutive groups of modes whose products are the dense dimensions (as lib/tt.ts). */
export function groupsOf(modes: readonly number[], shape: readonly number[]): number[] {
  const groups: number[] = [];
  let mi = 0;
  for (const n of shape) {
    let p = 1;
    let g = 0;
    while (p < n && mi < modes.length) {
      p *= modes[mi++]!;
      g++;
    }
    if (p !== n) throw new GpuUnavailableError("The entry's TT modes do not factor its dense shape.");
    groups.push(g);
  }
  while (mi < modes.length && modes[mi] === 1) {
    groups[groups.length - 1]!++;
    mi++;
  }
  return groups;
}

/** Whether a block of this entry can be reconstructed on the device (one TT mode per dense dimension). */
export function deviceBlockSupported(tt: TT): boolean {
  const shape = tt.shape ?? tt.modes;
  return shape.length === tt.modes.length && shape.every((s, i) => s === tt.modes[i]);
}

/** The first CUDA device as a DeviceBackend; handles are the addon's numbers. */
export class CudaDevice implements DeviceBackend<number> {
  readonly device = "cuda:0";

  bytesFor(tt: TT): number {
    return deviceBytesOf(tt);
  }

  async load(tt: TT): Promise<number> {
    const bytes = this.bytesFor(tt);
    const r = await call(() => native().gpuLoad(tt.cores.map(f32), [...tt.ranks], [...tt.modes]), bytes);
    return r.handle;
  }

  /** Loads and reports the host-to-device copy time (for bench/gpu.ts). */
  async loadTimed(tt: TT): Promise<{ handle: number; bytes: number; h2d_s: number }> {
    return call(() => native().gpuLoad(tt.cores.map(f32), [...tt.ranks], [...tt.modes]), this.bytesFor(tt));
  }

  free(handle: number): void {
    native().gpuRelease(handle);
  }

  async reconstruct(handle: number, tt: TT, slice?: [number, number][]): Promise<Float32Array> {
    const shape = tt.shape ?? tt.modes;
    if (slice && !deviceBlockSupported(tt))
      throw new GpuUnavailableError("Blocks of entries whose dense dimensions span several TT modes are reconstructed on the CPU.");
    return call(() => native().gpuReconstruct(handle, [...shape], groupsOf(tt.modes, shape), slice ? slice.flat() : null));
  }

  /** Seconds per whole reconstruction kept on the device (mean of `repeats`, CUDA events). */
  async reconstructTimed(handle: number, repeats: number): Promise<number> {
    return call(() => native().gpuReconstructTimed(handle, repeats));
  }

  async dot(a: number, b: number): Promise<number> {
    return call(() => native().gpuDot(a, b));
  }

  async dotDense(handle: number, x: Float32Array | Float64Array): Promise<number> {
    return call(() => native().gpuDotDense(handle, f32(x)));
  }

  async topk(query: number, candidates: number[], norms: Float64Array | null, metric: "cosine" | "dot" | "l2", k: number) {
    // handles as one Float64Array: the addon reads it in one pass instead of an Array.Get per handle
    const handles = Float64Array.from(candidates);
    return call(() => native().gpuTopk(query, handles, norms, metric, k));
  }

  /** Free and total device memory in bytes. */
  memory(): { free: number; total: number } {
    try {
      return native().gpuMemory();
    } catch (e) {
      throw gpuError(e);
    }
  }
}

/**
 * GPU serving as the engine configures it: `device` is SVC_ENGINE_DEVICE (auto, cpu, cuda,
 * cuda:N), `budgetBytes` SVC_ENGINE_GPU_CACHE_BYTES (null: half the device's free memory).
 * With cuda (or cuda:0) query.topk also scores on the device; with auto only serve does.
 * @example const gpu = gpuServingFor("auto", null); // { unavailable: "..." } on a machine without a GPU
 */
export function gpuServingFor(device: string, budgetBytes: number | null): GpuServing {
  if (device === "cpu") return { unavailable: "GPU serving is disabled by SVC_ENGINE_DEVICE=cpu." };
  const m = /^cuda:(\d+)$/.exec(device);
  if (m && m[1] !== "0") return { unavailable: `Only CUDA device 0 is supported; SVC_ENGINE_DEVICE is ${device}.` };
  const s = gpuStatus();
  if (s.device === null)
    return { unavailable: `No usable CUDA device: ${s.reason?.replace(/^no usable CUDA device: /, "") ?? "none found"}`.replace(/\.?$/, ".") };
  const dev = new CudaDevice();
  let budget = budgetBytes;
  if (budget === null) {
    try {
      budget = Math.floor(dev.memory().free / 2);
    } catch (e) {
      return { unavailable: (e as Error).message };
    }
  }
  // auto: serve on the device when asked; cuda: top-K queries use resident entries as well
  return gpuServing(dev, budget, device.startsWith("cuda"));
}
