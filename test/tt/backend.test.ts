// tt.backend reports the ISA, threads and CUDA state truthfully; SVC_TT_ISA and SVC_TT_THREADS
// force the kernels and pool, and every ISA computes the same results.
import test from "tape";
import { spawnSync } from "node:child_process";
import * as tt from "../../lib/tt.js";

test("backend: fields and their meaning", (t) => {
  const b = tt.backend();
  t.ok(["avx512", "avx2", "scalar"].includes(b.isa), `isa ${b.isa}`);
  t.ok(Number.isInteger(b.threads) && b.threads >= 1, `threads ${b.threads}`);
  t.equal(typeof b.cuda_compiled, "boolean", "cuda_compiled is a boolean");
  if (b.cuda_device === null) t.ok(typeof b.reason === "string" && b.reason.length > 0, `no device, reason: ${b.reason}`);
  else t.equal(b.reason, null, `device ${b.cuda_device}, no reason`);
  if (!b.cuda_compiled) t.equal(b.cuda_device, null, "no device without CUDA code");
  t.end();
});

const script = `
import * as tt from "./lib/tt.ts";
const n = 48, x = new Float64Array(n * n * n);
for (let i = 0; i < x.length; i++) x[i] = Math.sin(i * 0.001) + Math.cos((i % 4099) * 0.01) + ((i * 7919) % 13) * 1e-3;
const r = await tt.compress(x, [n, n, n], { tolerance: 1e-4, modes: [n, n, n] });
const d = await tt.dot(r, r);
console.log(JSON.stringify({ b: tt.backend(), ranks: r.ranks, err: r.relative_error, d }));
`;

function runWith(env: Record<string, string>) {
  const p = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    env: { ...process.env, ...env },
    cwd: new URL("../..", import.meta.url).pathname,
    encoding: "utf8",
  });
  if (p.status !== 0) throw new Error(p.stderr);
  return JSON.parse(p.stdout.trim().split("\n").pop()!) as { b: tt.Backend; ranks: number[]; err: number; d: number };
}

test("backend: SVC_TT_ISA forces the kernels and every ISA agrees with the scalar oracle", (t) => {
  const scalar = runWith({ SVC_TT_ISA: "scalar", SVC_TT_THREADS: "1" });
  t.equal(scalar.b.isa, "scalar", "SVC_TT_ISA=scalar is honoured");
  t.equal(scalar.b.threads, 1, "SVC_TT_THREADS=1 is honoured");
  const best = tt.backend().isa;
  for (const isa of ["avx2", "avx512"]) {
    const r = runWith({ SVC_TT_ISA: isa, SVC_TT_THREADS: "2" });
    const supported = r.b.isa === isa;
    if (!supported) {
      t.ok(r.b.isa_note !== null, `${isa} unsupported here: ${r.b.isa_note}`);
      continue;
    }
    t.equal(r.b.threads, 2, `${isa}: 2 threads`);
    t.deepEqual(r.ranks, scalar.ranks, `${isa}: same ranks as scalar`);
    t.ok(Math.abs(r.d - scalar.d) <= 1e-10 * Math.abs(scalar.d), `${isa}: same norm`);
    t.ok(r.err <= 1e-4 && Math.abs(r.err - scalar.err) < 1e-7, `${isa}: same error`);
  }
  const bogus = runWith({ SVC_TT_ISA: "sse9" });
  t.equal(bogus.b.isa, best, "an unknown SVC_TT_ISA falls back to the best ISA");
  t.ok(bogus.b.isa_note && /SVC_TT_ISA/.test(bogus.b.isa_note), "and says so");
  t.end();
});
