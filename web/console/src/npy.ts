// The .npy download of an entry: the served bytes behind numpy's version 1.0 header (version
// 2.0 past 64 KiB of header), as lib/npy.ts writes it. A copy of its header rule because that
// module works on Node Buffers, which the browser bundle has not; test/console/npy.test.ts
// checks the two byte for byte.

const DESCR: Readonly<Record<string, string>> = {
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
};

/** The header of a C-order .npy file of `dtype` and `shape`; data of that size follow it. */
export function npyHeader(dtype: string, shape: readonly number[]): Uint8Array<ArrayBuffer> {
  const descr = DESCR[dtype];
  if (descr === undefined) throw new Error(`The dtype ${dtype} has no .npy form.`);
  const tuple = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(", ")})`;
  const dict = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${tuple}, }`;
  // padded with spaces and a newline so that the data start on a 64-byte boundary
  let version = 1;
  let prefix = 10;
  let total = Math.ceil((prefix + dict.length + 1) / 64) * 64;
  if (total - prefix > 0xffff) {
    version = 2;
    prefix = 12;
    total = Math.ceil((prefix + dict.length + 1) / 64) * 64;
  }
  const out = new Uint8Array(new ArrayBuffer(total));
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, version, 0]);
  const len = total - prefix;
  const view = new DataView(out.buffer);
  if (version === 1) view.setUint16(8, len, true);
  else view.setUint32(8, len, true);
  const text = dict.padEnd(len - 1, " ") + "\n";
  for (let i = 0; i < text.length; i++) out[prefix + i] = text.charCodeAt(i);
  return out;
}

/** The served answer of a whole entry as a .npy file: bytes entries as a uint8 vector. */
export function npyBlob(dtype: string, shape: readonly number[], bytes: ArrayBuffer): Blob {
  const [d, s] = dtype === "bytes" ? ["uint8", [bytes.byteLength]] : [dtype, shape];
  return new Blob([npyHeader(d, s), bytes], { type: "application/octet-stream" });
}
