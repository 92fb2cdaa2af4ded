// Byte-level helpers of the store: typed views of payloads per dtype, float16/bfloat16
// conversion, the lossless codec (byte shuffle + deflate, off the event loop), norms
// and block extraction for dense data.
import { createHash } from "node:crypto";
import { promisify } from "node:util";
import { deflateRaw, deflateRawSync, inflateRaw, constants as zc } from "node:zlib";
import { itemsize, type Dtype } from "../fields.js";
import type { ServeArray } from "./types.js";
import { pacedScan } from "./pace.js";
import { native } from "../native.js";

const deflateAsync = promisify(deflateRaw);
const inflateAsync = promisify(inflateRaw);

/** The SHA-256 of `b` in hex, hashed 256 KiB at a time in slices of the event loop (pacedScan). */
export async function sha256hex(b: Uint8Array): Promise<string> {
  const h = createHash("sha256");
  await pacedScan(b.byteLength, (from, to) => {
    h.update(b.subarray(from, to));
  });
  return h.digest("hex");
}

export const product = (shape: readonly number[]): number => shape.reduce((a, b) => a * b, 1);

/** The bytes behind any typed array, Buffer or ArrayBuffer, without copying. */
export function asBytes(data: ArrayBufferView | ArrayBuffer): Uint8Array {
  // a detached buffer (transferred away) has 0 bytes, and a view of it cannot be made
  if (data.byteLength === 0) return new Uint8Array(0);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

type Ctor = { new (b: ArrayBuffer, off: number, len: number): ServeArray; new (len: number): ServeArray; BYTES_PER_ELEMENT: number };
const CTOR: Record<Dtype, Ctor> = {
  float32: Float32Array,
  float64: Float64Array,
  float16: Uint16Array,
  bfloat16: Uint16Array,
  int8: Int8Array,
  uint8: Uint8Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
  bool: Uint8Array,
  bytes: Uint8Array,
} as unknown as Record<Dtype, Ctor>;

/** A typed array of `dtype` over `bytes` (copied only when misaligned). */
export function typedView(bytes: Uint8Array, dtype: Dtype): ServeArray {
  const C = CTOR[dtype];
  const n = bytes.byteLength / C.BYTES_PER_ELEMENT;
  if (bytes.byteOffset % C.BYTES_PER_ELEMENT === 0) return new C(bytes.buffer as ArrayBuffer, bytes.byteOffset, n);
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return new C(copy.buffer, 0, n);
}

/** A new, empty typed array of `dtype` with `n` elements. */
export function allocTyped(dtype: Dtype, n: number): ServeArray {
  return new CTOR[dtype](n);
}

// ---- float16 / bfloat16 ----

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function halfToFloat(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * f * 2 ** -24;
  if (e === 31) return f ? NaN : s * Infinity;
  return s * (1 + f / 1024) * 2 ** (e - 15);
}

/** float32 → IEEE half, round to nearest even. */
export function floatToHalf(x: number): number {
  f32[0] = x;
  const b = u32[0]!;
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && h & 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && h & 1)) h++;
  return sign | h;
}

export const bf16ToFloat = (h: number): number => {
  u32[0] = h << 16;
  return f32[0]!;
};

export function floatToBf16(x: number): number {
  f32[0] = x;
  const b = u32[0]!;
  if ((b & 0x7f800000) === 0x7f800000 && b & 0x7fffff) return ((b >>> 16) & 0x8000) | 0x7fc0;
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

/**
 * Dense floating data as Float32Array or Float64Array: float64 stays float64, float16 and
 * bfloat16 widen to float32 (the TT engine works in float32 or float64).
 */
export function toWorkingFloat(arr: ServeArray, dtype: Dtype): Float32Array | Float64Array {
  if (dtype === "float32") return arr as Float32Array;
  if (dtype === "float64") return arr as Float64Array;
  const src = arr as Uint16Array;
  const out = new Float32Array(src.length);
  const conv = dtype === "float16" ? halfToFloat : bf16ToFloat;
  for (let i = 0; i < src.length; i++) out[i] = conv(src[i]!);
  return out;
}

/** Any numeric dense array as float64 (for norms and dense arithmetic on integer data). */
export function toFloat64(arr: ServeArray, dtype: Dtype): Float64Array {
  if (dtype === "float64") return arr as Float64Array;
  if (dtype === "float16" || dtype === "bfloat16") return Float64Array.from(toWorkingFloat(arr, dtype));
  const out = new Float64Array(arr.length);
  for (let i = 0; i < arr.length; i++) out[i] = Number(arr[i]!);
  return out;
}

/** A float32/float64 array converted to the output floating dtype. */
export function fromWorkingFloat(arr: Float32Array | Float64Array, dtype: "float32" | "float64" | "float16" | "bfloat16"): ServeArray {
  if (dtype === "float32") return arr instanceof Float32Array ? arr : Float32Array.from(arr);
  if (dtype === "float64") return arr instanceof Float64Array ? arr : Float64Array.from(arr);
  const out = new Uint16Array(arr.length);
  const conv = dtype === "float16" ? floatToHalf : floatToBf16;
  for (let i = 0; i < arr.length; i++) out[i] = conv(arr[i]!);
  return out;
}

/** Frobenius norm accumulated in float64, with scaling against overflow. */
export function denseNorm(x: ArrayLike<number>): number {
  const scale = maxAbs(x);
  if (scale === 0 || !Number.isFinite(scale)) return scale;
  return scale * Math.sqrt(addScaledSquares(x, scale));
}

/** The largest |x_i|, at least `from` (a running maximum over blocks). */
export function maxAbs(x: ArrayLike<number>, from = 0): number {
  let m = from;
  for (let i = 0; i < x.length; i++) m = Math.max(m, Math.abs(x[i]!));
  return m;
}

/** `sum` plus the sum of (x_i / scale)^2, added in order (a running sum over blocks). */
export function addScaledSquares(x: ArrayLike<number>, scale: number, sum = 0): number {
  let s = sum;
  for (let i = 0; i < x.length; i++) {
    const v = x[i]! / scale;
    s += v * v;
  }
  return s;
}

export function denseDot64(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
}

export function hasNonFinite(x: ArrayLike<number>): boolean {
  for (let i = 0; i < x.length; i++) if (!Number.isFinite(x[i]!)) return true;
  return false;
}

// ---- lossless codec ----

/** Groups byte k of every element together: multi-byte integers then deflate far better. */
export function shuffle(src: Uint8Array, width: number): Uint8Array {
  if (width <= 1) return src;
  const n = src.length / width;
  const out = new Uint8Array(src.length);
  for (let b = 0; b < width; b++) for (let i = 0; i < n; i++) out[b * n + i] = src[i * width + b]!;
  return out;
}

export function unshuffle(src: Uint8Array, width: number): Uint8Array {
  if (width <= 1) return src;
  const n = src.length / width;
  const out = new Uint8Array(src.length);
  for (let b = 0; b < width; b++) for (let i = 0; i < n; i++) out[i * width + b] = src[b * n + i]!;
  return out;
}

// zlib runs off the event loop, but it hands its output over in chunks (16 KiB by default) that
// are then joined on the loop: for 100 MiB, thousands of callbacks and a copy of the whole. An
// output buffer as large as the whole output, filled by one call that also finishes the stream
// (Z_FINISH), takes it in one piece, without the join.

/** Output room for deflate of `n` bytes: above zlib's worst case (deflateBound) for any input. */
const deflateRoom = (n: number): number => n + (n >>> 10) + 1024;

// Deflate over incompressible bytes (random, encrypted, already compressed) costs as much as
// over compressible ones and is then thrown away. Four windows spread over the data, deflated
// at the fastest level, say which case it is for a sixteenth to a quarter of the cost.
const SAMPLE_FROM_BYTES = 32 * 1024;
const SAMPLE_WINDOWS = 4;
const SAMPLE_WINDOW_MAX = 8 * 1024;

/**
 * Whether deflate over the whole (shuffled) data may reach `minRatio`: false when four spread
 * windows of it, deflated at level 1, gain less than half of the ratio's margin over 1 (level
 * 1 gives up little against the default level on such data). Data under 32 KiB is always
 * tried: the sample would cost about as much as the whole. Clear cases are decided from the
 * sample's byte statistics alone (native, a few percent of a level-1 deflate's time): bytes whose entropy
 * alone leaves room for the margin may pay; bytes with neither that room nor repeats to match
 * (random, encrypted, already compressed) do not.
 */
/**
 * `windows` windows of up to `maxBytes` (whole elements) spread evenly over the data, each
 * byte-shuffled as losslessEncode shuffles the whole, side by side: a sample for deflate.
 */
function shuffledWindows(bytes: Uint8Array, dtype: Dtype, windows: number, maxBytes: number): Uint8Array {
  const n = bytes.byteLength;
  const width = dtype === "bytes" || dtype === "bool" ? 1 : itemsize(dtype);
  const win = Math.max(width, Math.floor(maxBytes / width) * width);
  const sample = new Uint8Array(win * windows);
  for (let w = 0; w < windows; w++) {
    const at = Math.floor(((n - win) * w) / (windows - 1) / width) * width;
    sample.set(shuffle(bytes.subarray(at, at + win), width), w * win);
  }
  return sample;
}

export function deflateMayPay(bytes: Uint8Array, dtype: Dtype, minRatio: number): boolean {
  const n = bytes.byteLength;
  if (n < SAMPLE_FROM_BYTES) return true;
  const sample = shuffledWindows(bytes, dtype, SAMPLE_WINDOWS, Math.min(SAMPLE_WINDOW_MAX, n / 16));
  const need = 1 + (minRatio - 1) / 2;
  const { bits, repeated } = native().byteStats(sample);
  // Huffman coding of the bytes alone reaches about 8 / bits; a quarter bit per byte of margin
  if (8 / (bits + 0.25) >= need) return true;
  if (8 / bits < need && repeated < (need - 1) / 4) return false;
  const packed = deflateRawSync(sample, { level: 1 }).byteLength;
  return sample.byteLength / packed >= need;
}

/**
 * The ratio byte shuffle + deflate reaches on eight windows of up to 64 KiB spread over the data
 * (each shuffled as the whole is), at the level losslessEncode uses: an estimate of the whole's,
 * for about a twentieth of its cost from 10 MiB on.
 */
export async function deflateEstimate(bytes: Uint8Array, dtype: Dtype): Promise<number> {
  const sample = shuffledWindows(bytes, dtype, 8, Math.min(64 * 1024, bytes.byteLength / 8));
  const packed = await deflateAsync(sample, { level: zc.Z_DEFAULT_COMPRESSION });
  return sample.byteLength / packed.byteLength;
}

export async function losslessEncode(bytes: Uint8Array, dtype: Dtype): Promise<{ payload: Buffer; shuffle: number }> {
  const width = dtype === "bytes" || dtype === "bool" ? 1 : itemsize(dtype);
  const payload = await deflateAsync(shuffle(bytes, width), { level: zc.Z_DEFAULT_COMPRESSION, chunkSize: deflateRoom(bytes.byteLength), flush: zc.Z_FINISH });
  return { payload, shuffle: width };
}

// Type codes of the integer coder (native/pred_int.h); bool is coded as the uint8 it is stored as.
const INT_CODES: Partial<Record<Dtype, number>> = { int8: 1, uint8: 2, bool: 2, int16: 3, uint16: 4, int32: 5, uint32: 6, int64: 7, uint64: 8 };

/** Whether the integer coder takes `dtype`. */
export const intCoded = (dtype: Dtype): boolean => INT_CODES[dtype] !== undefined;

/**
 * Integer data coded by prediction (the previous value, Lorenzo or LOCO-I's median predictor,
 * per slab of about a million elements) and rANS, on the addon's threads; lossless.
 */
export function intPredEncode(bytes: Uint8Array, dtype: Dtype, shape: readonly number[]): Promise<Uint8Array> {
  return native().intEncode(bytes, INT_CODES[dtype]!, [...shape]);
}

/** The bytes of an intPredEncode stream made for (dtype, shape). */
export function intPredDecode(payload: Uint8Array, dtype: Dtype, shape: readonly number[]): Promise<Uint8Array> {
  return native().intDecode(payload, INT_CODES[dtype]!, [...shape]);
}

/** Inflates and unshuffles a payload; `size`, the decoded size when known, lets the output arrive in one piece. */
export async function losslessDecode(payload: Uint8Array, width: number, size?: number): Promise<Uint8Array> {
  const chunkSize = size !== undefined ? size + 1024 : undefined;
  return unshuffle(await inflateAsync(payload, chunkSize ? { chunkSize, flush: zc.Z_FINISH } : {}), width);
}

// ---- blocks ----

/** Copies the block `slice` (one [start, stop) per dimension) of a C-ordered array. */
export function extractBlock(src: ServeArray, shape: readonly number[], slice: readonly (readonly [number, number])[], dtype: Dtype): ServeArray {
  const d = shape.length;
  const outShape = slice.map(([a, b]) => b - a);
  const out = allocTyped(dtype, product(outShape));
  const strides = new Array<number>(d);
  let s = 1;
  for (let i = d - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i]!;
  }
  const inner = outShape[d - 1]!;
  const idx = new Array<number>(d - 1).fill(0);
  let o = 0;
  const rows = product(outShape.slice(0, -1));
  for (let r = 0; r < rows; r++) {
    let off = slice[d - 1]![0];
    for (let i = 0; i < d - 1; i++) off += (slice[i]![0] + idx[i]!) * strides[i]!;
    (out as Uint8Array).set((src as Uint8Array).subarray(off, off + inner), o);
    o += inner;
    for (let i = d - 2; i >= 0; i--) {
      if (++idx[i]! < outShape[i]!) break;
      idx[i] = 0;
    }
  }
  return out;
}
