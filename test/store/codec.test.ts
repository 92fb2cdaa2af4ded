// Byte-level helpers of the store: float16/bfloat16 conversion (rounding, subnormals,
// infinities, NaN), the byte shuffle, the lossless codec round trip and block extraction.
// Store-only: byte-level helpers, not store methods.
import test from "tape";
import {
  bf16ToFloat,
  extractBlock,
  floatToBf16,
  floatToHalf,
  halfToFloat,
  losslessDecode,
  losslessEncode,
  shuffle,
  unshuffle,
  denseNorm,
} from "../../lib/store/codec.js";

test("codec: float16 conversion", (t) => {
  const cases: [number, number][] = [
    [0, 0x0000],
    [-0, 0x8000],
    [1, 0x3c00],
    [-2, 0xc000],
    [65504, 0x7bff],
    [65520, 0x7c00],
    [1e6, 0x7c00],
    [Infinity, 0x7c00],
    [-Infinity, 0xfc00],
    [2 ** -24, 0x0001],
    [2 ** -14, 0x0400],
    [2 ** -26, 0x0000],
    [0.1, 0x2e66],
    [1 + 2 ** -11, 0x3c00], // halfway: ties to even (down)
    [1 + 3 * 2 ** -11, 0x3c02], // halfway: ties to even (up)
  ];
  for (const [x, h] of cases) t.equal(floatToHalf(x), h, `floatToHalf(${x}) = 0x${h.toString(16)}`);
  t.ok(Number.isNaN(halfToFloat(floatToHalf(NaN))), "NaN stays NaN");
  let exact = true;
  for (let h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) === 0x7c00 && h & 0x3ff) continue; // NaNs
    if (floatToHalf(halfToFloat(h)) !== h) exact = false;
  }
  t.ok(exact, "every non-NaN half round-trips through float");
  t.end();
});

test("codec: bfloat16 conversion", (t) => {
  t.equal(floatToBf16(1), 0x3f80, "1");
  t.equal(floatToBf16(-2), 0xc000, "-2");
  t.equal(bf16ToFloat(0x3f80), 1, "back to 1");
  t.equal(floatToBf16(1 + 2 ** -8), 0x3f80, "halfway rounds to even (down)");
  t.equal(floatToBf16(1 + 3 * 2 ** -8), 0x3f82, "halfway rounds to even (up)");
  t.ok(Number.isNaN(bf16ToFloat(floatToBf16(NaN))), "NaN stays NaN");
  t.equal(bf16ToFloat(floatToBf16(Infinity)), Infinity, "infinity");
  t.end();
});

test("codec: shuffle, lossless round trip, norms", async (t) => {
  const src = Uint8Array.from({ length: 24 }, (_, i) => i);
  t.deepEqual(Array.from(shuffle(src, 4).subarray(0, 6)), [0, 4, 8, 12, 16, 20], "byte 0 of every element first");
  t.deepEqual(unshuffle(shuffle(src, 4), 4), src, "unshuffle inverts shuffle");
  const data = new Uint8Array(Int32Array.from({ length: 5000 }, (_, i) => i * 3).buffer);
  const { payload, shuffle: w } = await losslessEncode(data, "int32");
  t.ok(w === 4 && payload.byteLength < data.byteLength / 4, `int32 ramp compresses (${data.byteLength} -> ${payload.byteLength})`);
  t.deepEqual(await losslessDecode(payload, w), data, "bit-exact round trip");
  t.equal(denseNorm([3, 4]), 5, "norm");
  t.equal(denseNorm([1e200, 1e200]), Math.SQRT2 * 1e200, "norm without overflow");
  t.end();
});

test("codec: block extraction", (t) => {
  const a = Int16Array.from({ length: 2 * 3 * 4 }, (_, i) => i);
  const b = extractBlock(
    a,
    [2, 3, 4],
    [
      [1, 2],
      [0, 3],
      [1, 3],
    ],
    "int16",
  );
  t.deepEqual(Array.from(b as Int16Array), [13, 14, 17, 18, 21, 22], "a 1x3x2 block");
  t.deepEqual(Array.from(extractBlock(a, [24], [[5, 8]], "int16") as Int16Array), [5, 6, 7], "1-D block");
  t.end();
});
