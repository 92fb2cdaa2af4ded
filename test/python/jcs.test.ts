// RFC 8785 in Python (python/svc_tensor/ijson.py) against the appliance's canonicalize
// 4.0.0, byte for byte, on seeded random documents: strings of every kind of code point
// (controls, quotes, backslashes, astral characters, U+2028), numbers from random double
// bit patterns and from decimal ranges, nested arrays and objects with member names that
// sort differently by code point and by UTF-16 unit. The Python reader must also find no
// I-JSON problem in what JSON.stringify writes.
import test from "tape";
import canonicalize from "canonicalize";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findPython, requirePython, runPy } from "./helpers.js";

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const rnd = mulberry32(20261126);
const pick = <T>(xs: T[]): T => xs[Math.floor(rnd() * xs.length)]!;
const dv = new DataView(new ArrayBuffer(8));

function randomString(): string {
  const n = Math.floor(rnd() * 8);
  let s = "";
  for (let i = 0; i < n; i++) {
    const kind = rnd();
    if (kind < 0.3) s += String.fromCharCode(0x20 + Math.floor(rnd() * 95));
    else if (kind < 0.45) s += String.fromCharCode(Math.floor(rnd() * 0x20));
    else if (kind < 0.55) s += pick(['"', "\\", "/", "\u007f", "\u2028", "\u2029", "\ufeff", "\uffff", "\u00e9", "\u20ac"]);
    else if (kind < 0.75) s += String.fromCodePoint(0x10000 + Math.floor(rnd() * 0xfffff));
    else {
      let c = 0xa0 + Math.floor(rnd() * (0xfffd - 0xa0));
      if (c >= 0xd800 && c <= 0xdfff) c = 0x4e00;
      s += String.fromCharCode(c);
    }
  }
  return s;
}

function randomNumber(): number {
  const kind = rnd();
  if (kind < 0.4) {
    for (;;) {
      for (let i = 0; i < 8; i++) dv.setUint8(i, Math.floor(rnd() * 256));
      const x = dv.getFloat64(0);
      if (Number.isFinite(x)) return x;
    }
  }
  if (kind < 0.7) return (rnd() - 0.5) * 10 ** Math.floor(rnd() * 50 - 25);
  if (kind < 0.9) return Math.round((rnd() - 0.5) * 2 ** Math.floor(rnd() * 60));
  return pick([0, -0, 1e21, 1e-7, 1e-6, 5e-324, Number.MAX_VALUE, Number.MAX_SAFE_INTEGER, 0.1, 1 / 3]);
}

function randomValue(depth: number): unknown {
  const kind = rnd();
  if (depth > 4 || kind < 0.35) return kind < 0.2 ? randomNumber() : kind < 0.3 ? randomString() : pick([null, true, false]);
  if (kind < 0.65) return Array.from({ length: Math.floor(rnd() * 5) }, () => randomValue(depth + 1));
  const o: Record<string, unknown> = {};
  for (let i = Math.floor(rnd() * 6); i > 0; i--)
    o[rnd() < 0.2 ? pick(["\uffff", "\ud83d\ude00", "10", "2", "", "a", "A", "\u00e9"]) : randomString()] = randomValue(depth + 1);
  return o;
}

const CHECK = `
import json, sys
sys.path.insert(0, '.')
from svc_tensor.ijson import read_json, canonical_string
inputs = open(sys.argv[1], encoding='utf-8').read().split('\\n')
expected = open(sys.argv[2], encoding='utf-8').read().split('\\n')
bad = []
for i, (text, want) in enumerate(zip(inputs, expected)):
    value, problem = read_json(text)
    got = canonical_string(value)
    if problem is not None or got != want:
        bad.append([i, got[:200], want[:200], repr(problem)])
print(json.dumps({'n': len(inputs), 'bad': bad[:5], 'n_bad': len(bad)}))
`;

test("RFC 8785 in Python agrees with canonicalize 4.0.0 on 2,000 random documents", async (t) => {
  const py = findPython();
  if (!requirePython(t, py, "python3 (3.11 or later)")) return;
  const docs = Array.from({ length: 2000 }, () => randomValue(0));
  // one document a line: JSON.stringify escapes U+2028/2029 nowhere, but never writes a raw line feed
  const inputs = docs.map((d) => JSON.stringify(d));
  const expected = docs.map((d) => canonicalize(d) as string);
  const dir = mkdtempSync(join(tmpdir(), "svc-py-jcs-"));
  try {
    writeFileSync(join(dir, "in.txt"), inputs.join("\n"));
    writeFileSync(join(dir, "want.txt"), expected.join("\n"));
    const r = await runPy(py, ["-S", "-c", CHECK, join(dir, "in.txt"), join(dir, "want.txt")]);
    t.equal(r.code, 0, `the check ran${r.code ? `: ${r.stderr.slice(-1500)}` : ""}`);
    const out = JSON.parse(r.stdout || "{}") as { n: number; n_bad: number; bad: unknown[] };
    t.equal(out.n, 2000, "2,000 documents read");
    t.equal(out.n_bad, 0, `every canonical form is the same bytes${out.n_bad ? `: ${JSON.stringify(out.bad)}` : ""}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
