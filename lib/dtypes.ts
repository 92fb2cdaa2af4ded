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
