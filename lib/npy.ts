// NumPy `.npy` files (format versions 1.0, 2.0 and 3.0) for the dtypes of docs/api.md
// (names and data types) that numpy has. Reading: C order, and Fortran order reordered to C;
// object arrays and structured dtypes are refused with a ValidationError; big-endian data are
// byte-swapped to the little-endian order the store uses. bfloat16 and `bytes` have no numpy descr,
// so writeNpy refuses them (serve bfloat16 entries as float32 instead).
import { ValidationError } from "./errors.js";
import { itemsize, type Dtype } from "./dtypes.js";

/** Dtypes that have a numpy descr: every dtype of docs/api.md (names and data types) but bfloat16 and bytes. */
export type NpyDtype = Exclude<Dtype, "bfloat16" | "bytes">;

const DESCR_OF: Readonly<Record<NpyDtype, string>> = Object.freeze({
  float16: "<f2",
  float32: "<f4",
  float64: "<f8",
  int8: "|i1",
  uint8: "|u1",
  int16: "<i2",
  uint16: "<u2",
  int32: "<i4",
  uint32: "<u4",
  int64: "<i8",
  uint64: "<u8",
  bool: "|b1",
});

// type letter + itemsize (byte-order character stripped) → dtype
const DTYPE_OF: Readonly<Record<string, NpyDtype>> = Object.freeze({
  f2: "float16",
  f4: "float32",
  f8: "float64",
  i1: "int8",
  u1: "uint8",
  i2: "int16",
  u2: "uint16",
  i4: "int32",
  u4: "uint32",
  i8: "int64",
  u8: "uint64",
  b1: "bool",
});

const MAGIC = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]); // \x93NUMPY

/** A dense array as read from or written to a `.npy` file: little-endian, C order. */
export interface NpyArray {
  dtype: NpyDtype;
  /** Dimensions; `[]` for a 0-d (scalar) array. */
  shape: number[];
  /** The element bytes, little-endian, C order (product(shape) × itemsize bytes). */
  data: Buffer;
}

/** Typed-array view that matches an npy dtype (float16 as raw Uint16Array bits). */
export type NpyTypedArray =
  Float32Array | Float64Array | Int8Array | Uint8Array | Int16Array | Uint16Array | Int32Array | Uint32Array | BigInt64Array | BigUint64Array;

/** True when `d` can be written to / read from a `.npy` file. */
export function isNpyDtype(d: string): d is NpyDtype {
  return Object.prototype.hasOwnProperty.call(DESCR_OF, d);
}

/** The numpy descr written for a dtype (`float32` → `<f4`). */
export function npyDescr(d: NpyDtype): string {
  return DESCR_OF[d];
}

function fail(message: string): never {
  throw new ValidationError(message, "npy");
}

// A tiny reader for the Python literal of the header: a dict of str keys whose values
// are str, bool or tuples of ints. Anything else (e.g. a structured descr list) fails.
type PyValue = string | boolean | number[];

function parseHeaderDict(text: string): Record<string, PyValue> {
  let i = 0;
  const ws = () => {
    while (i < text.length && /\s/.test(text[i]!)) i++;
  };
  const expect = (c: string) => {
    ws();
    if (text[i] !== c) fail(`The .npy header is malformed: expected '${c}' at character ${i}.`);
    i++;
  };
  const str = (): string => {
    ws();
    const q = text[i];
    if (q !== "'" && q !== '"') fail(`The .npy header is malformed: expected a string at character ${i}.`);
    const end = text.indexOf(q, i + 1);
    if (end < 0) fail("The .npy header is malformed: unterminated string.");
    const s = text.slice(i + 1, end);
    i = end + 1;
    return s;
  };
  const value = (key: string): PyValue => {
    ws();
    const c = text[i];
    if (c === "'" || c === '"') return str();
    if (text.startsWith("True", i)) {
      i += 4;
      return true;
    }
    if (text.startsWith("False", i)) {
      i += 5;
      return false;
    }
    if (c === "(") {
      i++;
      const dims: number[] = [];
      let comma = false;
      for (;;) {
        ws();
        if (text[i] === ")") {
          // (12) is the number 12 in Python, not a tuple: numpy writes a single dimension (12,)
          if (dims.length === 1 && !comma) fail(`The .npy header's ${key} (${dims[0]}) is not a tuple; one dimension is written (${dims[0]},).`);
          i++;
          return dims;
        }
        const m = /^\d+L?/.exec(text.slice(i, i + 24));
        if (!m) fail("The .npy header's shape must be a tuple of non-negative integers.");
        const n = Number(m[0].replace("L", ""));
        if (!Number.isSafeInteger(n)) fail("The .npy header's shape has a dimension too large.");
        dims.push(n);
        i += m[0].length;
        ws();
        comma = text[i] === ",";
        if (comma) i++;
        else if (text[i] !== ")") fail("The .npy header's shape must be a tuple of non-negative integers.");
      }
    }
    if (c === "[") {
      if (key === "descr") fail("Structured .npy dtypes (a descr list) are not supported; save a plain numeric array.");
      fail(`The .npy header's ${key} is a list; numpy writes a tuple there, such as (3, 4).`);
    }
    return fail(`The .npy header is malformed: unexpected value at character ${i}.`);
  };
  const out: Record<string, PyValue> = {};
  expect("{");
  for (;;) {
    ws();
    if (text[i] === "}") {
      i++;
      break;
    }
    const k = str();
    expect(":");
    out[k] = value(k);
    ws();
    if (text[i] === ",") i++;
    else if (text[i] !== "}") fail(`The .npy header is malformed: expected ',' or '}' at character ${i}.`);
  }
  ws();
  if (i !== text.length) fail("The .npy header is malformed: text after the dictionary.");
  return out;
}

/** The dtype a descr names and whether its bytes must be swapped; refuses what we do not store. */
function dtypeOfDescr(descr: string): { dtype: NpyDtype; swap: boolean } {
  if (/^[<>|=]?O/.test(descr)) fail("Object arrays (.npy descr 'O') are not supported: they hold Python objects, not numbers.");
  const m = /^([<>|=]?)([a-zA-Z])(\d+)$/.exec(descr);
  const dtype = m ? DTYPE_OF[`${m[2]}${m[3]}`] : undefined;
  if (!m || !dtype) {
    fail(`The .npy dtype '${descr}' is not supported; use one of float16, float32, float64, int8-int64, uint8-uint64 or bool.`);
  }
  const order = m[1] === "=" ? (osLittle ? "<" : ">") : m[1];
  return { dtype, swap: order === ">" && itemsize(dtype) > 1 };
}

const osLittle = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function swapInPlace(buf: Buffer, size: number): void {
  if (size === 2) buf.swap16();
  else if (size === 4) buf.swap32();
  else if (size === 8) buf.swap64();
}

/** Parsed header of a `.npy` file and where its data start. */
export interface NpyHeader {
  version: [number, number];
  dtype: NpyDtype;
  shape: number[];
  /** True when the file stores big-endian data (readNpy swaps them). */
  bigEndian: boolean;
  /**
   * True when the data are in Fortran (column-major) order (readNpy reorders them to C order);
   * false for an array with at most one dimension above 1, whose bytes are the same in both.
   */
  fortranOrder: boolean;
  /** Offset of the first data byte. */
  dataOffset: number;
  /** product(shape) × itemsize. */
  dataBytes: number;
}

/**
 * Parses the header of a `.npy` file (the whole file or at least its first bytes).
 * Throws a ValidationError for anything that is not an array of a supported dtype.
 */
export function readNpyHeader(buf: Uint8Array): NpyHeader {
  const b = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  if (b.length < 10 || !b.subarray(0, 6).equals(MAGIC)) fail("The file is not a .npy file (bad magic string).");
  const major = b[6]!;
  const minor = b[7]!;
  let headerLen: number;
  let start: number;
  // numpy writes and reads 1.0, 2.0 and 3.0 only
  if (minor !== 0) return fail(`The .npy format version ${major}.${minor} is not supported (1.0, 2.0 and 3.0 are).`);
  if (major === 1) {
    headerLen = b.readUInt16LE(8);
    start = 10;
  } else if (major === 2 || major === 3) {
    if (b.length < 12) fail("The .npy file is truncated inside its header.");
    headerLen = b.readUInt32LE(8);
    start = 12;
  } else {
    return fail(`The .npy format version ${major}.${minor} is not supported (1.0, 2.0 and 3.0 are).`);
  }
  if (headerLen > 1 << 20) fail("The .npy header is implausibly long.");
  if (b.length < start + headerLen) fail("The .npy file is truncated inside its header.");
  const text = b.subarray(start, start + headerLen).toString(major === 3 ? "utf8" : "latin1");
  const dict = parseHeaderDict(text.trim());
  const { descr, fortran_order: fortran, shape } = dict;
  if (typeof descr !== "string") fail("The .npy header has no string 'descr'.");
  const { dtype, swap } = dtypeOfDescr(descr);
  if (typeof fortran !== "boolean") fail("The .npy header has no boolean 'fortran_order'.");
  if (!Array.isArray(shape)) fail("The .npy header has no tuple 'shape'.");
  let count = 1;
  for (const n of shape) count *= n;
  const dataBytes = count * itemsize(dtype);
  if (!Number.isSafeInteger(dataBytes)) fail("The .npy shape describes more data than can be addressed.");
  const fortranOrder = fortran && shape.filter((n) => n > 1).length > 1;
  return { version: [major, minor], dtype, shape, bigEndian: swap, fortranOrder, dataOffset: start + headerLen, dataBytes };
}

/**
 * Reads a whole `.npy` file held in memory. The returned `data` is a copy, little-endian,
 * so it never aliases `buf`. Refuses truncated files and files with trailing bytes.
 *
 * @example
 *   const { dtype, shape, data } = readNpy(await fs.readFile("field.npy"));
 */
export function readNpy(buf: Uint8Array): NpyArray {
  const h = readNpyHeader(buf);
  const have = buf.byteLength - h.dataOffset;
  if (have < h.dataBytes) fail(`The .npy file is truncated: its header announces ${h.dataBytes} data bytes but only ${have} follow.`);
  if (have > h.dataBytes) fail(`The .npy file has ${have - h.dataBytes} bytes after the data its header announces.`);
  const src = buf.subarray(h.dataOffset, h.dataOffset + h.dataBytes);
  const data = Buffer.alloc(h.dataBytes);
  if (h.fortranOrder) fortranToC(src, data, h.shape, itemsize(h.dtype));
  else data.set(src);
  if (h.bigEndian) swapInPlace(data, itemsize(h.dtype));
  return { dtype: h.dtype, shape: h.shape, data };
}

/**
 * Copies `src`, elements of `size` bytes in Fortran (column-major) order of `shape`, to `dst` in
 * C (row-major) order: the last axis is walked innermost, its step in `src` being the product
 * of the dimensions before it, and an odometer carries the others.
 */
function fortranToC(src: Uint8Array, dst: Uint8Array, shape: readonly number[], size: number): void {
  const nd = shape.length;
  const strides = new Array<number>(nd); // Fortran strides, in elements
  let acc = 1;
  for (let a = 0; a < nd; a++) {
    strides[a] = acc;
    acc *= shape[a]!;
  }
  if (acc === 0) return;
  // whole words where the element size allows, so that an element is one load and one store
  const words = size === 8 ? 2 : 1;
  const view = (b: Uint8Array) =>
    size === 1 ? b : size === 2 ? new Uint16Array(b.buffer, b.byteOffset, b.byteLength / 2) : new Uint32Array(b.buffer, b.byteOffset, b.byteLength / 4);
  const aligned = (b: Uint8Array) => b.byteOffset % Math.min(size, 4) === 0;
  const s = view(aligned(src) ? src : new Uint8Array(src)); // a copy: a Buffer's slice() would share the bytes
  const d = view(dst); // readNpy's Buffer.alloc: its own memory, aligned
  const last = shape[nd - 1]!;
  const step = strides[nd - 1]!;
  const index = new Array<number>(nd - 1).fill(0);
  let base = 0; // Fortran offset of the row's first element
  for (let out = 0; out < d.length;) {
    if (words === 1) {
      for (let k = 0, from = base; k < last; k++, from += step) d[out++] = s[from]!;
    } else {
      for (let k = 0, from = 2 * base; k < last; k++, from += 2 * step) {
        d[out++] = s[from]!;
        d[out++] = s[from + 1]!;
      }
    }
    // the next row: the odometer over the axes before the last, the last of them fastest
    for (let a = nd - 2; a >= 0; a--) {
      base += strides[a]!;
      if (++index[a]! < shape[a]!) break;
      base -= strides[a]! * shape[a]!;
      index[a] = 0;
    }
  }
}

/**
 * Encodes an array as a `.npy` file (format 1.0, or 2.0 when the header needs it).
 * `data` holds little-endian C-order elements: a typed array or a Buffer.
 *
 * @example
 *   await fs.writeFile("out.npy", writeNpy({ dtype: "float32", shape: [2, 3], data: new Float32Array(6) }));
 */
export function writeNpy(arr: { dtype: string; shape: readonly number[]; data: ArrayBufferView | ArrayBuffer }): Buffer {
  const { dtype, shape } = arr;
  if (dtype === "bfloat16") fail("bfloat16 has no numpy dtype; serve the entry as float32 to write a .npy file.");
  if (!isNpyDtype(dtype)) fail(`The dtype '${dtype}' cannot be written to a .npy file.`);
  if (!Array.isArray(shape) || !shape.every((n) => Number.isSafeInteger(n) && n >= 0)) {
    fail("shape must be a list of non-negative integers.");
  }
  const bytes = arr.data instanceof ArrayBuffer ? Buffer.from(arr.data) : Buffer.from(arr.data.buffer, arr.data.byteOffset, arr.data.byteLength);
  const expected = shape.reduce((a, n) => a * n, 1) * itemsize(dtype);
  if (bytes.length !== expected) {
    fail(`The data hold ${bytes.length} bytes but shape [${shape.join(", ")}] of ${dtype} needs ${expected}.`);
  }
  const tuple = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(", ")})`;
  const dict = `{'descr': '${DESCR_OF[dtype]}', 'fortran_order': False, 'shape': ${tuple}, }`;
  // numpy pads the header with spaces and a final newline so that the data start on a
  // 64-byte boundary (aligned reads for memory-mapped files).
  let version = 1;
  let prefix = 10;
  let total = Math.ceil((prefix + dict.length + 1) / 64) * 64;
  if (total - prefix > 0xffff) {
    version = 2;
    prefix = 12;
    total = Math.ceil((prefix + dict.length + 1) / 64) * 64;
  }
  const headerLen = total - prefix;
  const out = Buffer.alloc(total + bytes.length);
  MAGIC.copy(out, 0);
  out[6] = version;
  out[7] = 0;
  if (version === 1) out.writeUInt16LE(headerLen, 8);
  else out.writeUInt32LE(headerLen, 8);
  out.write(dict.padEnd(headerLen - 1, " ") + "\n", prefix, "latin1");
  bytes.copy(out, total);
  return out;
}

/** A typed array over `data` for `dtype` (copies only when `data` is misaligned). */
export function npyTypedArray(dtype: NpyDtype, data: Buffer): NpyTypedArray {
  const size = itemsize(dtype);
  let src = data;
  if (data.byteOffset % size !== 0) {
    src = Buffer.alloc(data.length);
    data.copy(src);
  }
  const n = src.length / size;
  const ab = src.buffer;
  const o = src.byteOffset;
  switch (dtype) {
    case "float32":
      return new Float32Array(ab, o, n);
    case "float64":
      return new Float64Array(ab, o, n);
    case "float16":
    case "uint16":
      return new Uint16Array(ab, o, n);
    case "int8":
      return new Int8Array(ab, o, n);
    case "uint8":
    case "bool":
      return new Uint8Array(ab, o, n);
    case "int16":
      return new Int16Array(ab, o, n);
    case "int32":
      return new Int32Array(ab, o, n);
    case "uint32":
      return new Uint32Array(ab, o, n);
    case "int64":
      return new BigInt64Array(ab, o, n);
    case "uint64":
      return new BigUint64Array(ab, o, n);
  }
}
