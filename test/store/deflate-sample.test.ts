// The sampled compressibility check of puts (deflateMayPay in lib/store/codec.ts): random bytes
// are stored as they are without deflate over the whole, compressible ones still deflated, and
// awkward data (a compressible stretch between random ones, tiny sizes, odd lengths, wide
// integers) either deflated or stored exactly; every entry reads back byte for byte.
import test from "tape";
import { randomBytes } from "node:crypto";
import { deflateMayPay } from "../../lib/store/codec.js";
import { createStore } from "../../lib/store/index.js";
import { native } from "../../lib/native.js";

test("deflate sample: verdicts on typical and awkward data", (t) => {
  const random = randomBytes(64 * 1024);
  t.equal(deflateMayPay(random, "bytes", 1.2), false, "64 KiB of random bytes: not worth deflating");
  t.equal(deflateMayPay(randomBytes(4 << 20), "bytes", 1.2), false, "4 MiB of random bytes");
  t.equal(deflateMayPay(Buffer.alloc(64 * 1024), "bytes", 1.2), true, "zeros");
  t.equal(deflateMayPay(Buffer.from("the quick brown fox jumps over the lazy dog. ".repeat(2000)), "bytes", 1.2), true, "repeated text");
  t.equal(deflateMayPay(randomBytes(16 * 1024), "bytes", 1.2), true, "under 32 KiB: always tried");
  // small integers in int32: the shuffled planes of the high bytes are zeros
  const ints = new Int32Array(32 * 1024).map(() => Math.floor(Math.random() * 200));
  t.equal(deflateMayPay(new Uint8Array(ints.buffer), "int32", 1.2), true, "small int32 values");
  // a 4-byte-period pattern whose shuffle is what compresses
  const wide = new Uint32Array(20_000).map((_, i) => i);
  t.equal(deflateMayPay(new Uint8Array(wide.buffer), "uint32", 1.2), true, "counting uint32");
  // odd length, width that does not divide the windows evenly
  t.equal(deflateMayPay(randomBytes(32 * 1024 + 7), "bytes", 1.2), false, "odd length of random bytes");
  t.equal(deflateMayPay(new Uint8Array(new Float64Array(40_000).fill(1.5).buffer), "float64", 1.2), true, "constant float64");
  // a min ratio of 1: anything that does not grow is worth it, random bytes grow under deflate
  t.equal(deflateMayPay(Buffer.alloc(40_000, 7), "bytes", 1), true, "min ratio 1, constant bytes");
  t.end();
});

test("deflate sample: the byte statistics that decide clear cases without deflate", (t) => {
  const { byteStats } = native();
  const zeros = byteStats(Buffer.alloc(4096));
  t.equal(zeros.bits, 0, "zeros: 0 bits per byte");
  t.ok(zeros.repeated > 0.99, `zeros: every position repeats (${zeros.repeated})`);
  const two = byteStats(Buffer.from("ab".repeat(2048)));
  t.ok(Math.abs(two.bits - 1) < 1e-12, "two values in equal shares: 1 bit per byte");
  const random = byteStats(randomBytes(16 * 1024));
  t.ok(random.bits > 7.9 && random.bits <= 8, `random: ${random.bits.toFixed(3)} bits per byte`);
  t.ok(random.repeated < 0.001, `random: next to no repeats (${random.repeated})`);
  // random 1 KiB blocks repeated: every byte value about equally common, yet deflate matches them
  const blocks = byteStats(Buffer.concat(Array.from({ length: 16 }, () => randomBytes(1024))));
  t.ok(blocks.bits > 7.5, "distinct random blocks: high entropy");
  const same = randomBytes(1024);
  const rep = byteStats(Buffer.concat(Array.from({ length: 16 }, () => same)));
  t.ok(
    rep.bits > 7.5 && rep.repeated > 0.5,
    `one random block repeated: high entropy (${rep.bits.toFixed(2)}), most positions repeat (${rep.repeated.toFixed(2)})`,
  );
  t.deepEqual(byteStats(new Uint8Array(0)), { bits: 0, repeated: 0 }, "no bytes");
  t.deepEqual(byteStats(new Uint8Array(3).fill(9)), { bits: 0, repeated: 0 }, "fewer than 4 bytes: no 4-byte repeats");
  for (const bad of [new Float32Array(4), "text", null, [1, 2, 3]])
    t.throws(() => byteStats(bad as unknown as Uint8Array), /Uint8Array/, `refused: ${Object.prototype.toString.call(bad)}`);
  // a repeated random block is decided by the deflate sample, which finds the repeats
  t.equal(deflateMayPay(Buffer.concat(Array.from({ length: 64 }, () => same)), "bytes", 1.2), true, "64 copies of a random 1 KiB block: worth deflating");
  t.end();
});

test("deflate sample: puts of random and compressible bytes store what they should", async (t) => {
  const store = await createStore({ path: ":memory:" });
  try {
    const random = randomBytes(64 * 1024);
    const r = await store.put("ns", "random", random, { dtype: "bytes" });
    t.equal(r.verdict, "passthrough", "random bytes stored as they are");
    const back = await store.serve("ns", "random");
    t.ok(Buffer.from(back.data.buffer, back.data.byteOffset, back.data.byteLength).equals(random), "read back byte for byte");

    const text = Buffer.from("svc-tensor stores tensors; ".repeat(4000));
    const c = await store.put("ns", "text", text, { dtype: "bytes" });
    t.equal(c.verdict, "lossless", "compressible bytes deflated");
    t.ok(c.compression_ratio > 10, `ratio ${c.compression_ratio.toFixed(1)} above 10`);
    const tb = await store.serve("ns", "text");
    t.ok(Buffer.from(tb.data.buffer, tb.data.byteOffset, tb.data.byteLength).equals(text), "deflated entry read back byte for byte");

    // copies of one random block: the byte statistics alone would say random; the repeats say otherwise
    const block = randomBytes(2048);
    const copies = Buffer.concat(Array.from({ length: 64 }, () => block));
    const cp = await store.put("ns", "copies", copies, { dtype: "bytes" });
    t.equal(cp.verdict, "lossless", "copies of a random block deflated");
    const cb = await store.serve("ns", "copies");
    t.ok(Buffer.from(cb.data.buffer, cb.data.byteOffset, cb.data.byteLength).equals(copies), "copies read back byte for byte");

    // random bytes with a long zero stretch in the middle: the sample sees it, the put deflates
    const mixed = randomBytes(256 * 1024);
    mixed.fill(0, 32 * 1024, 224 * 1024);
    const m = await store.put("ns", "mixed", mixed, { dtype: "bytes" });
    t.equal(m.verdict, "lossless", "mostly zeros between random ends: deflated");
    const mb = await store.serve("ns", "mixed");
    t.ok(Buffer.from(mb.data.buffer, mb.data.byteOffset, mb.data.byteLength).equals(mixed), "mixed entry read back byte for byte");
  } finally {
    await store.close();
  }
});
