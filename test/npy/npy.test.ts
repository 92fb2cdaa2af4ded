// readNpy / writeNpy: every numpy dtype of docs/api.md (names and data types) against files whose headers
// are built by hand here (no numpy needed), format versions 1.0/2.0/3.0, big-endian
// conversion, Fortran order reordered to C order, and the refusals (object arrays, structured
// dtypes, truncation).
import test from "tape";
import { readNpy, readNpyHeader, writeNpy, npyTypedArray, type NpyDtype } from "../../lib/npy.js";
import { ValidationError } from "../../lib/errors.js";

/** A .npy file with a hand-written header dict, padded like numpy does (to 64 bytes). */
function handMade(dict: string, data: Uint8Array, version = 1): Buffer {
  const prefix = version === 1 ? 10 : 12;
  const total = Math.ceil((prefix + dict.length + 1) / 64) * 64;
  const hlen = total - prefix;
  const head = Buffer.alloc(total);
  Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, version, 0]).copy(head);
  if (version === 1) head.writeUInt16LE(hlen, 8);
  else head.writeUInt32LE(hlen, 8);
  head.write(dict.padEnd(hlen - 1, " ") + "\n", prefix, version === 3 ? "utf8" : "latin1");
  return Buffer.concat([head, data]);
}

// dtype, descr, element values (little-endian encoder)
const CASES: Array<{
  dtype: NpyDtype;
  descr: string;
  size: number;
  put: (b: Buffer, i: number, v: number) => void;
  get: (b: Buffer, i: number) => number | bigint;
}> = [
  { dtype: "float32", descr: "<f4", size: 4, put: (b, i, v) => b.writeFloatLE(v * 1.5, i * 4), get: (b, i) => b.readFloatLE(i * 4) },
  { dtype: "float64", descr: "<f8", size: 8, put: (b, i, v) => b.writeDoubleLE(v / 3, i * 8), get: (b, i) => b.readDoubleLE(i * 8) },
  // float16 bits of 0, 1, 2, 3 ... built by hand: 1.0 = 0x3c00, 2.0 = 0x4000, 3.0 = 0x4200
  {
    dtype: "float16",
    descr: "<f2",
    size: 2,
    put: (b, i, v) => b.writeUInt16LE([0, 0x3c00, 0x4000, 0x4200, 0x4400, 0x4500][v]!, i * 2),
    get: (b, i) => b.readUInt16LE(i * 2),
  },
  { dtype: "int8", descr: "|i1", size: 1, put: (b, i, v) => b.writeInt8(-v, i), get: (b, i) => b.readInt8(i) },
  { dtype: "uint8", descr: "|u1", size: 1, put: (b, i, v) => b.writeUInt8(250 + v, i), get: (b, i) => b.readUInt8(i) },
  { dtype: "int16", descr: "<i2", size: 2, put: (b, i, v) => b.writeInt16LE(-300 * v, i * 2), get: (b, i) => b.readInt16LE(i * 2) },
  { dtype: "uint16", descr: "<u2", size: 2, put: (b, i, v) => b.writeUInt16LE(60000 + v, i * 2), get: (b, i) => b.readUInt16LE(i * 2) },
  { dtype: "int32", descr: "<i4", size: 4, put: (b, i, v) => b.writeInt32LE(-70000 * v, i * 4), get: (b, i) => b.readInt32LE(i * 4) },
  { dtype: "uint32", descr: "<u4", size: 4, put: (b, i, v) => b.writeUInt32LE(4e9 + v, i * 4), get: (b, i) => b.readUInt32LE(i * 4) },
  { dtype: "int64", descr: "<i8", size: 8, put: (b, i, v) => b.writeBigInt64LE(-(2n ** 40n) * BigInt(v), i * 8), get: (b, i) => b.readBigInt64LE(i * 8) },
  { dtype: "uint64", descr: "<u8", size: 8, put: (b, i, v) => b.writeBigUInt64LE(2n ** 63n + BigInt(v), i * 8), get: (b, i) => b.readBigUInt64LE(i * 8) },
  { dtype: "bool", descr: "|b1", size: 1, put: (b, i, v) => b.writeUInt8(v % 2, i), get: (b, i) => b.readUInt8(i) },
];

function payload(c: (typeof CASES)[number], n: number): Buffer {
  const b = Buffer.alloc(n * c.size);
  for (let i = 0; i < n; i++) c.put(b, i, i);
  return b;
}

const catchErr = (f: () => unknown): unknown => {
  try {
    f();
  } catch (e) {
    return e;
  }
  return undefined;
};

for (const c of CASES) {
  test(`npy ${c.dtype}: a hand-made v1.0 file reads with the right dtype, shape and values, and round-trips through writeNpy`, (t) => {
    const data = payload(c, 6);
    const file = handMade(`{'descr': '${c.descr}', 'fortran_order': False, 'shape': (2, 3), }`, data);
    const arr = readNpy(file);
    t.equal(arr.dtype, c.dtype, "dtype from descr");
    t.deepEqual(arr.shape, [2, 3], "shape from header");
    t.ok(arr.data.equals(data), "data bytes identical");
    for (let i = 0; i < 6; i++) t.equal(c.get(arr.data, i), c.get(data, i), `element ${i}`);
    const again = writeNpy(arr);
    t.ok(again.equals(file), "writeNpy reproduces the numpy-style file byte for byte");
    const back = readNpy(again);
    t.deepEqual({ dtype: back.dtype, shape: back.shape }, { dtype: c.dtype, shape: [2, 3] }, "re-read header");
    t.ok(back.data.equals(data), "re-read data");
    t.equal(npyTypedArray(c.dtype, back.data).length, 6, "typed-array view has one element per value");
    t.end();
  });

  if (c.size > 1) {
    test(`npy ${c.dtype}: big-endian '>' data are converted to little-endian`, (t) => {
      const le = payload(c, 4);
      const be = Buffer.from(le);
      if (c.size === 2) be.swap16();
      else if (c.size === 4) be.swap32();
      else be.swap64();
      const file = handMade(`{'descr': '>${c.descr.slice(1)}', 'fortran_order': False, 'shape': (4,), }`, be);
      const h = readNpyHeader(file);
      t.equal(h.bigEndian, true, "header reports big-endian");
      const arr = readNpy(file);
      t.ok(arr.data.equals(le), "data swapped to little-endian");
      t.end();
    });
  }
}

test("npy: numpy's own bytes (np.save of arange(6).reshape(2,3)) are read and reproduced exactly", (t) => {
  // produced once with numpy 2.4 `np.save`, pasted here so the test needs no Python
  const f4 = Buffer.from(
    "k05VTVBZAQB2AHsnZGVzY3InOiAnPGY0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDIsIDMpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAAAAACAPwAAAEAAAEBAAACAQAAAoEA=",
    "base64",
  );
  const arr = readNpy(f4);
  t.deepEqual(Array.from(npyTypedArray(arr.dtype, arr.data) as ArrayLike<number>), [0, 1, 2, 3, 4, 5], "values 0..5");
  t.ok(writeNpy(arr).equals(f4), "writeNpy output equals numpy's");
  const be = Buffer.from(
    "k05VTVBZAQB2AHsnZGVzY3InOiAnPmkyJywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDIsIDMpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAABAAIAAwAEAAU=",
    "base64",
  );
  const b = readNpy(be);
  t.equal(b.dtype, "int16", "'>i2' is int16");
  t.deepEqual(Array.from(npyTypedArray(b.dtype, b.data) as ArrayLike<number>), [0, 1, 2, 3, 4, 5], "big-endian numpy file converted");
  t.end();
});

test("npy: format versions 2.0 and 3.0 headers are read; a huge header makes writeNpy use 2.0", (t) => {
  const data = Buffer.from(new Float64Array([1, 2, 3]).buffer);
  const v2 = readNpy(handMade("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", data, 2));
  t.deepEqual([v2.dtype, v2.shape], ["float64", [3]], "v2.0 read");
  t.deepEqual(readNpyHeader(handMade("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", data, 3)).version, [3, 0], "v3.0 header version");
  const v3 = readNpy(handMade("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", data, 3));
  t.ok(v3.data.equals(data), "v3.0 data read");
  // 25000 dims of size 1 need a header over 64 KiB
  const shape = Array.from({ length: 25000 }, () => 1);
  const big = writeNpy({ dtype: "uint8", shape, data: new Uint8Array(1) });
  t.equal(big[6], 2, "writeNpy chose format 2.0 for a header over 65535 bytes");
  const back = readNpy(big);
  t.equal(back.shape.length, 25000, "the 2.0 file reads back");
  t.equal((big.readUInt32LE(8) + 12) % 64, 0, "data start on a 64-byte boundary");
  t.end();
});

test("npy: 0-d arrays, 1-element tuples, Python 2 long suffixes and double-quoted keys parse", (t) => {
  const one = Buffer.from(new Float32Array([7]).buffer);
  t.deepEqual(readNpy(handMade("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", one)).shape, [], "0-d shape");
  t.deepEqual(readNpy(handMade('{"descr": "<f4", "fortran_order": False, "shape": (1L,)}', one)).shape, [1], "(1L,) shape");
  const s = writeNpy({ dtype: "float32", shape: [], data: new Float32Array([7]) });
  t.ok(s.toString("latin1").includes("'shape': ()"), "0-d written as ()");
  t.ok(readNpy(s).data.equals(one), "0-d round trip");
  t.end();
});

test("npy: object arrays, structured and unknown dtypes are refused with a clear ValidationError", (t) => {
  const d = Buffer.alloc(24);
  const cases: Array<[string, Buffer, RegExp]> = [
    ["object", handMade("{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", d), /Object arrays/],
    ["structured", handMade("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", d), /Structured/],
    ["a list for the shape", handMade("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", d), /shape is a list; numpy writes a tuple/],
    [
      "(6) for the shape",
      handMade("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", d),
      /shape \(6\) is not a tuple; one dimension is written \(6,\)/,
    ],
    [
      "version 1.5",
      (() => {
        const f = handMade("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", d);
        f[7] = 5;
        return f;
      })(),
      /format version 1\.5 is not supported/,
    ],
    ["complex", handMade("{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", d), /'<c8' is not supported/],
    ["unicode", handMade("{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }", d), /'<U3' is not supported/],
    ["bad magic", Buffer.concat([Buffer.from("NOTNPY"), d]), /bad magic/],
    [
      "version 4",
      (() => {
        const f = handMade("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", d);
        f[6] = 4;
        return f;
      })(),
      /version 4\.0 is not supported/,
    ],
    ["truncated data", handMade("{'descr': '<f4', 'fortran_order': False, 'shape': (7,), }", d), /truncated/],
    ["trailing bytes", handMade("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", d), /after the data/],
    ["truncated header", handMade("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", d).subarray(0, 40), /truncated inside its header/],
    ["missing shape", handMade("{'descr': '<f4', 'fortran_order': False, }", d), /no tuple 'shape'/],
    ["negative dim", handMade("{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }", d), /non-negative integers/],
    ["garbage", handMade("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), } junk", d), /malformed/],
  ];
  for (const [name, file, re] of cases) {
    const e = catchErr(() => readNpy(file));
    t.ok(e instanceof ValidationError, `${name}: ValidationError`);
    t.match((e as Error).message, re, `${name}: ${(e as Error).message}`);
    t.equal((e as ValidationError).code, "bad_request", `${name}: code bad_request`);
  }
  t.end();
});

test("npy: a Fortran-order flag on an array with at most one dimension above 1 is accepted (same bytes as C order)", (t) => {
  const d = Buffer.from(new Float32Array([1, 2, 3]).buffer);
  const arr = readNpy(handMade("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 3), }", d));
  t.deepEqual(arr.shape, [1, 3], "shape kept");
  t.ok(arr.data.equals(d), "data kept");
  t.end();
});

test("npy: a Fortran-ordered array is read in C order, for every element size, big-endian and unaligned too", (t) => {
  const shapes = [
    [3, 4],
    [2, 3, 4],
    [5, 1, 3],
    [2, 3, 4, 5],
    [1, 7, 1, 2],
    [4, 0, 3],
  ];
  for (const { dtype, descr, size, put } of CASES) {
    for (const shape of shapes) {
      const count = shape.reduce((a, b) => a * b, 1);
      // element (i0, i1, ...) has the value of its C-order index; in the file it sits at its
      // Fortran offset i0 + d0 * (i1 + d1 * (...))
      const c = Buffer.alloc(count * size);
      const f = Buffer.alloc(count * size);
      for (let ci = 0; ci < count; ci++) {
        let rest = ci;
        let fi = 0;
        let stride = 1;
        const idx = new Array<number>(shape.length);
        for (let a = shape.length - 1; a >= 0; a--) {
          idx[a] = rest % shape[a]!;
          rest = Math.floor(rest / shape[a]!);
        }
        for (let a = 0; a < shape.length; a++) {
          fi += idx[a]! * stride;
          stride *= shape[a]!;
        }
        // values as varied as each encoder takes (float16's has six, uint8's from 250 up)
        const v = dtype === "float16" || dtype === "uint8" ? ci % 6 : ci % 40;
        put(c, ci, v);
        put(f, fi, v);
      }
      const tuple = `(${shape.join(", ")}${shape.length === 1 ? "," : ""})`;
      const arr = readNpy(handMade(`{'descr': '${descr}', 'fortran_order': True, 'shape': ${tuple}, }`, f));
      t.deepEqual([arr.dtype, arr.shape], [dtype, shape], `${descr} ${tuple}: dtype and shape`);
      t.ok(arr.data.equals(c), `${descr} ${tuple}: the elements in C order`);
      if (size > 1) {
        const be = Buffer.from(f);
        if (size === 2) be.swap16();
        else if (size === 4) be.swap32();
        else be.swap64();
        const big = readNpy(handMade(`{'descr': '>${descr.slice(1)}', 'fortran_order': True, 'shape': ${tuple}, }`, be));
        t.ok(big.data.equals(c), `>${descr.slice(1)} ${tuple}: big-endian, in C order and little-endian`);
      }
      // the file at an odd offset in a larger buffer: its data are not aligned to the element size
      const file = handMade(`{'descr': '${descr}', 'fortran_order': True, 'shape': ${tuple}, }`, f);
      const odd = Buffer.alloc(file.length + 1);
      file.copy(odd, 1);
      t.ok(readNpy(odd.subarray(1)).data.equals(c), `${descr} ${tuple}: from an unaligned buffer`);
    }
  }
  t.equal(readNpyHeader(handMade("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", Buffer.alloc(24))).fortranOrder, true, "the header says so");
  t.end();
});

test("npy: writeNpy refuses bfloat16, bytes and a data length that does not match the shape", (t) => {
  t.match(
    (catchErr(() => writeNpy({ dtype: "bfloat16", shape: [2], data: new Uint16Array(2) })) as Error).message,
    /bfloat16 has no numpy dtype/,
    "bfloat16 refused",
  );
  t.match((catchErr(() => writeNpy({ dtype: "bytes", shape: [2], data: new Uint8Array(2) })) as Error).message, /cannot be written/, "bytes refused");
  t.match((catchErr(() => writeNpy({ dtype: "float32", shape: [3], data: new Float32Array(2) })) as Error).message, /needs 12/, "length mismatch refused");
  t.ok(catchErr(() => writeNpy({ dtype: "float32", shape: [1.5], data: new Float32Array(2) })) instanceof ValidationError, "non-integer shape refused");
  t.end();
});

test("npy: random bytes never crash readNpy with anything but a ValidationError", (t) => {
  let seed = 12345;
  const rnd = () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
  const base = writeNpy({ dtype: "int16", shape: [4, 4], data: new Int16Array(16) });
  let other = 0;
  for (let i = 0; i < 2000; i++) {
    const f = Buffer.from(base.subarray(0, Math.floor(rnd() * base.length) + 1));
    for (let j = 0; j < 3; j++) f[Math.floor(rnd() * f.length)] = Math.floor(rnd() * 256);
    const e = catchErr(() => readNpy(f));
    if (e !== undefined && !(e instanceof ValidationError)) other++;
  }
  t.equal(other, 0, "2000 corrupted files: only ValidationErrors");
  t.end();
});
