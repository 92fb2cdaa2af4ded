// The dtypes of docs/api.md (names and data types) and their element sizes, without zod, so
// that the CLI's read commands and the .npy reader can use them without loading the schemas
// (lib/fields.ts builds dtypeSchema from DTYPES).
export const DTYPES = [
  "float32",
  "float64",
  "float16",
  "bfloat16",
  "int8",
  "uint8",
  "int16",
  "uint16",
  "int32",
  "uint32",
  "int64",
  "uint64",
  "bool",
  "bytes",
] as const;
export type Dtype = (typeof DTYPES)[number];

const ITEMSIZE: Readonly<Record<Dtype, number>> = Object.freeze({
  float32: 4,
  float64: 8,
  float16: 2,
  bfloat16: 2,
  int8: 1,
  uint8: 1,
  int16: 2,
  uint16: 2,
  int32: 4,
  uint32: 4,
  int64: 8,
  uint64: 8,
  bool: 1,
  bytes: 1,
});

/** Bytes per element of `d` (1 for bytes). */
export const itemsize = (d: Dtype): number => ITEMSIZE[d];

export const FLOAT_DTYPES: ReadonlySet<Dtype> = new Set(["float32", "float64", "float16", "bfloat16"]);
export const isFloatDtype = (d: Dtype): boolean => FLOAT_DTYPES.has(d);

/**
 * A copy of put data taken when put is called, of the same kind (a Buffer stays a Buffer, a
 * typed array keeps its class): the put then stores what the caller passed even where the
 * caller changes or reuses its buffer before the put resolves. Detached data (no bytes) is
 * returned as it is, for the put to refuse.
 */
export function copyPutData<T extends ArrayBufferView | ArrayBuffer>(data: T): T {
  if (data.byteLength === 0) return data;
  if (data instanceof ArrayBuffer) return data.slice(0) as T;
  if (Buffer.isBuffer(data)) return Buffer.from(data) as unknown as T;
  if (data instanceof DataView) return new DataView(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength)) as unknown as T;
  return (data as unknown as { slice(): T }).slice();
}
