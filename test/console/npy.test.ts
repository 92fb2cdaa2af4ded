// The console's .npy download (web/console/src/npy.ts) writes the header lib/npy.ts writes, byte
// for byte, for every dtype and for shapes from a scalar-like vector to a version-2 header; a
// file made of it reads back with readNpy to the same dtype, shape and bytes.
import test from "tape";
import { npyBlob, npyHeader } from "../../web/console/src/npy.js";
import { readNpy, writeNpy } from "../../lib/npy.js";

const DTYPES: Array<[string, number]> = [
  ["float16", 2],
  ["float32", 4],
  ["float64", 8],
  ["int8", 1],
  ["uint8", 1],
  ["int16", 2],
  ["uint16", 2],
  ["int32", 4],
  ["uint32", 4],
  ["int64", 8],
  ["uint64", 8],
  ["bool", 1],
];

test("npyHeader equals lib/npy's header for every dtype and assorted shapes", (t) => {
  const shapes = [[1], [7], [2, 3], [4, 1, 5], [1, 1, 1, 1, 1, 1, 1, 1], Array.from({ length: 6000 }, () => 1)];
  for (const [dtype, size] of DTYPES) {
    for (const shape of shapes) {
      const n = shape.reduce((a, b) => a * b, 1);
      const full = writeNpy({ dtype, shape, data: new Uint8Array(n * size) });
      const header = npyHeader(dtype, shape);
      t.ok(
        Buffer.from(header).equals(full.subarray(0, header.length)) && full.length === header.length + n * size,
        `${dtype} [${shape.length > 8 ? `${shape.length} dims` : shape.join(",")}]: ${header.length} header bytes, version ${header[6]}`,
      );
    }
  }
  t.throws(() => npyHeader("bfloat16", [2]), /bfloat16 has no \.npy form/, "bfloat16 refused (the console serves it as float32)");
  t.throws(() => npyHeader("complex64", [2]), /no \.npy form/, "an unknown dtype refused");
  t.end();
});

test("npyBlob: a served float32 entry and a bytes entry read back with readNpy", async (t) => {
  const values = Float32Array.from({ length: 24 }, (_, i) => i / 3);
  const f = readNpy(Buffer.from(await npyBlob("float32", [2, 3, 4], values.buffer).arrayBuffer()));
  t.deepEqual([f.dtype, f.shape, Buffer.from(f.data).equals(Buffer.from(values.buffer))], ["float32", [2, 3, 4], true], "float32 [2,3,4]");
  const raw = new TextEncoder().encode("opaque payload").buffer as ArrayBuffer;
  const b = readNpy(Buffer.from(await npyBlob("bytes", [], raw).arrayBuffer()));
  t.deepEqual([b.dtype, b.shape, Buffer.from(b.data).toString()], ["uint8", [14], "opaque payload"], "bytes as a uint8 vector");
});
