// The CLI's traps for a first user, each against a real gateway and engine where one is
// involved: raw files need --dtype/--shape or --bytes; put and import agree on what a .npy
// is (magic bytes); negative --slice values need no '='; per-command --help; svc search and
// svc topk; an import held back by the rate limit says it waits and how long; connection
// refused names `svc up` and the URL.
import test from "tape";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { svc } from "./helpers.js";
import { startStack } from "./stack.js";
import { readNpy, writeNpy, npyTypedArray } from "../../lib/npy.js";

test("svc put: a raw file without flags is refused with what to pass; --dtype/--shape and --bytes work; a fake .npy is refused", async (t) => {
  const stack = await startStack();
  const env = { SVC_GATE_URL: stack.gateway, SVC_API_KEY: stack.apiKey };
  try {
    const f32 = Float32Array.from({ length: 8 * 8 * 8 }, (_, i) => Math.sin(i / 9));
    const file = join(stack.dir, "t0.f32");
    await writeFile(file, Buffer.from(f32.buffer));
    const bare = await svc(["put", "ns", "field/t0", file], env);
    t.equal(bare.code, 2, "exit 2: a usage error, nothing stored");
    t.match(
      bare.err,
      /^svc: \S+t0\.f32 is not a \.npy file: describe its raw data with --dtype and --shape \(for example --dtype float32 --shape 32,32,32\), or pass --bytes to store it as opaque bytes\.\n/,
      bare.err.split("\n")[0],
    );
    const ls0 = await svc(["ls", "ns"], env);
    t.equal(ls0.out, "", "nothing was stored");
    const typed = await svc(["put", "ns", "field/t0", file, "--dtype", "float32", "--shape", "8,8,8", "--json"], env);
    t.equal(typed.code, 0, `with --dtype and --shape: exit 0 ${typed.err}`);
    t.deepEqual([JSON.parse(typed.out).dtype, JSON.parse(typed.out).shape], ["float32", [8, 8, 8]], "stored as a float32 8x8x8 tensor");
    const opaque = await svc(["put", "ns", "blob", file, "--bytes", "--json"], env);
    t.equal(opaque.code, 0, "--bytes: exit 0");
    t.equal(JSON.parse(opaque.out).dtype, "bytes", "stored as bytes");
    const both = await svc(["put", "ns", "blob", file, "--bytes", "--dtype", "float32"], env);
    t.equal(both.code, 2, "--bytes with --dtype is a usage error");
    t.match(both.err, /^svc: --bytes stores the file as opaque bytes: leave out --dtype and --shape\.\n/, "one sentence");

    const fake = join(stack.dir, "fake.npy");
    await writeFile(fake, "no magic here");
    const fp = await svc(["put", "ns", "fake", fake], env);
    t.equal(fp.code, 2, "a .npy name without the magic bytes: exit 2");
    t.match(
      fp.err,
      /^svc: \S+fake\.npy is named \.npy but does not start with the NumPy magic bytes; pass --bytes to store it as opaque bytes\.\n/,
      fp.err.split("\n")[0],
    );
    const real = join(stack.dir, "array.data"); // a .npy file under another name: its magic bytes decide
    await writeFile(real, writeNpy({ dtype: "int16", shape: [4, 4], data: Int16Array.from({ length: 16 }, (_, i) => i) }));
    const rp = await svc(["put", "ns", "renamed", real, "--json"], env);
    t.equal(rp.code, 0, "a .npy file with another name is read as .npy");
    t.deepEqual([JSON.parse(rp.out).dtype, JSON.parse(rp.out).shape], ["int16", [4, 4]], "dtype and shape from its header");

    // svc import agrees: the same fake .npy fails there for the same reason
    const dir = join(stack.dir, "imp");
    await mkdir(dir);
    await writeFile(join(dir, "fake.npy"), "no magic here");
    await writeFile(join(dir, "good.npy"), writeNpy({ dtype: "uint8", shape: [3], data: new Uint8Array([1, 2, 3]) }));
    const imp = await svc(["import", "ns", dir], env);
    t.equal(imp.code, 1, "import: exit 1 (one failed)");
    t.match(imp.out, /^ {2}\S*fake\.npy: named \.npy but does not start with the NumPy magic bytes\.$/m, "the same reason as svc put");
    t.match(imp.out, /^Imported 1 of 2 files/m, "the good file is imported");
  } finally {
    await stack.close();
  }
});

test("svc serve --slice -1,:,: (no '='): negative indices work; --tolerance -1 reaches the validation (a usage error), not the parser", async (t) => {
  const stack = await startStack();
  const env = { SVC_GATE_URL: stack.gateway, SVC_API_KEY: stack.apiKey };
  try {
    const ints = Int32Array.from({ length: 4 * 3 * 2 }, (_, i) => i);
    const f = join(stack.dir, "a.npy");
    await writeFile(f, writeNpy({ dtype: "int32", shape: [4, 3, 2], data: ints }));
    t.equal((await svc(["put", "ns", "a", f], env)).code, 0, "put");
    const out = join(stack.dir, "last.npy");
    const r = await svc(["serve", "ns", "a", "-o", out, "--slice", "-1,:,:"], env);
    t.equal(r.code, 0, `--slice -1,:,: exits 0 ${r.err}`);
    const a = readNpy(await readFile(out));
    t.deepEqual(a.shape, [1, 3, 2], "one plane");
    t.deepEqual(Array.from(npyTypedArray(a.dtype, a.data) as Int32Array), [18, 19, 20, 21, 22, 23], "the last plane's values");
    const r2 = await svc(["serve", "ns", "a", "--slice", "-2:,-1", "-o", join(stack.dir, "b.npy")], env);
    t.equal(r2.code, 0, "--slice -2:,-1 before -o");
    t.deepEqual(readNpy(await readFile(join(stack.dir, "b.npy"))).shape, [2, 1, 2], "shape of -2:,-1");
    const tol = await svc(["put", "ns", "b", f, "--tolerance", "-1"], env);
    t.equal(tol.code, 2, "--tolerance -1 is parsed and refused as a usage error");
    t.doesNotMatch(tol.err, /ambiguous/i, `not an ambiguity error: ${tol.err.trim()}`);
    t.match(tol.err, /^svc: --tolerance: tolerance must be at least 0\.\nRun 'svc put --help' for usage\.\n$/, "the store's rule, and the hint");
    const s0 = await svc(["serve", "ns", "a", "-o", out, "--slice", "0:2,"], env);
    t.equal(s0.code, 0, `--slice 0:2, (a trailing comma) exits 0 ${s0.err}`);
    t.deepEqual(readNpy(await readFile(out)).shape, [2, 3, 2], "the dimensions after the comma are whole, as numpy's a[0:2,]");
  } finally {
    await stack.close();
  }
});

test("per-command --help: each data command prints its own usage (and 'svc help CMD' does the same)", async (t) => {
  for (const c of ["put", "get", "ls", "rm", "serve", "search", "topk", "import", "up"]) {
    const r = await svc([c, "--help"]);
    t.equal(r.code, 0, `svc ${c} --help exits 0`);
    t.match(r.out, new RegExp(`^Usage: svc ${c} `), `svc ${c} --help starts with its own usage line`);
    const h = await svc(["help", c]);
    t.equal(h.out, r.out, `svc help ${c} prints the same`);
  }
  const put = await svc(["put", "--help"]);
  t.match(put.out, /--bytes/, "put's help names --bytes");
  t.doesNotMatch(put.out, /Usage: svc serve/, "and not another command's usage");
});

test("svc search and svc topk against a real gateway", async (t) => {
  const stack = await startStack();
  const env = { SVC_GATE_URL: stack.gateway, SVC_API_KEY: stack.apiKey };
  try {
    const n = 16;
    for (let s = 0; s < 4; s++) {
      const a = new Float32Array(n * n);
      for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) a[i * n + j] = Math.sin((i + s) / 4) * Math.cos(j / 5);
      const f = join(stack.dir, `f${s}.npy`);
      await writeFile(f, writeNpy({ dtype: "float32", shape: [n, n], data: a }));
      const p = await svc(["put", "ns", `f/${s}`, f, "--meta", JSON.stringify({ run: s, kind: s % 2 ? "odd" : "even" })], env);
      t.equal(p.code, 0, `put f/${s}`);
    }
    await writeFile(join(stack.dir, "odd.bin"), "x");
    t.equal((await svc(["put", "ns", "blob", join(stack.dir, "odd.bin"), "--bytes"], env)).code, 0, "a bytes entry");

    const s1 = await svc(["search", "ns", "--filter", '{"run": {"$gte": 2}}'], env);
    t.equal(s1.code, 0, `search exits 0 ${s1.err}`);
    t.deepEqual(
      s1.out
        .trim()
        .split("\n")
        .map((l) => l.split("\t")[0]),
      ["f/2", "f/3"],
      "run >= 2",
    );
    t.match(s1.out, /^f\/3\tv1\t\{"run":3,"kind":"odd"\}$/m, "key, version, metadata");
    t.match(s1.err, /^2 of 2 matching entries\.\n$/, "count on stderr");
    const s2 = JSON.parse((await svc(["search", "ns", "--filter", '{"kind": "even"}', "--limit", "1", "--json"], env)).out);
    t.deepEqual([s2.results.map((r: { key: string }) => r.key), s2.total, s2.next_offset], [["f/0"], 2, 1], "--limit pages, --json");
    const bad = await svc(["search", "ns", "--filter", '{"run": {"$regex": "x"}}'], env);
    t.equal(bad.code, 2, "an unknown operator is a usage error (checked with the service's filter rules)");
    t.match(
      bad.err,
      /^svc: --filter: filter\.run\.\$regex: unknown operator '\$regex' \(the filter language is in docs\/api\.md\)\.\n/,
      `one sentence: ${bad.err.trim()}`,
    );
    const notObj = await svc(["search", "ns", "--filter", "[1]"], env);
    t.equal(notObj.code, 2, "a filter that is not an object is a usage error");

    const k = await svc(["topk", "ns", "f/0", "--k", "2"], env);
    t.equal(k.code, 0, `topk exits 0 ${k.err}`);
    const rows = k.out
      .trim()
      .split("\n")
      .map((l) => l.split("\t"));
    t.equal(rows.length, 2, "k = 2 results");
    t.equal(rows[0]![1], "f/1", "the nearest field is the one shifted by one step");
    t.ok(Number(rows[0]![0]) >= Number(rows[1]![0]), "best first (cosine)");
    t.match(k.err, /^2 results by cosine; 3 entries scanned, 1 skipped \(another shape or bytes\)\.\n$/, k.err.trim());
    const kj = JSON.parse((await svc(["topk", "ns", "f/0", "--include-self", "--metric", "l2", "--filter", '{"kind": "even"}', "--json"], env)).out);
    t.deepEqual(
      kj.results.map((r: { key: string }) => r.key),
      ["f/0", "f/2"],
      "--include-self, --filter and l2 (lowest first)",
    );
    t.equal(kj.results[0].score, 0, "l2 distance to itself is 0");
    const m = await svc(["topk", "ns", "f/0", "--metric", "manhattan"], env);
    t.equal(m.code, 2, "unknown metric: usage error");
  } finally {
    await stack.close();
  }
});

test("svc import held back by the rate limit says it is waiting, and for how long", async (t) => {
  const stack = await startStack(["ns"], { SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "2", SVC_GATE_DEFAULT_RATE_LIMIT_WINDOW_S: "2" });
  try {
    const src = join(stack.dir, "many");
    await mkdir(src);
    for (let i = 0; i < 5; i++) await writeFile(join(src, `f${i}.npy`), writeNpy({ dtype: "uint8", shape: [8], data: new Uint8Array(8).fill(i) }));
    const r = await svc(["import", "ns", src, "--concurrency", "1"], { SVC_GATE_URL: stack.gateway, SVC_API_KEY: stack.apiKey });
    t.equal(r.code, 0, "exit 0: nothing failed");
    t.match(r.out, /^Imported 5 of 5 files/m, "all imported");
    const waits = r.err.split("\n").filter((l) => l.startsWith("svc: the tenant's rate limit was reached"));
    t.ok(waits.length >= 1, `the wait is said (${waits.length} times)`);
    t.match(waits[0] ?? "", /^svc: the tenant's rate limit was reached \(2 requests per window\); waiting [12] s before going on\.$/, waits[0]);
  } finally {
    await stack.close();
  }
});

test("connection refused: the sentence asks whether `svc up` runs at that URL, for data and admin commands", async (t) => {
  const data = await svc(["ls", "ns"], { SVC_API_KEY: "svc_live_x", SVC_GATE_URL: "http://127.0.0.1:1" });
  t.equal(data.code, 1, "exit 1");
  t.equal(
    data.err,
    "svc: Nothing answers at http://127.0.0.1:1 (connection refused): is `svc up` running at http://127.0.0.1:1? (SVC_GATE_URL sets another address.)\n",
    "data command",
  );
  const admin = await svc(["usage"], { SVC_GATE_ENGINE_SERVICE_KEY: "s".repeat(40), SVC_GATE_URL: "http://127.0.0.1:1" });
  t.equal(admin.code, 1, "exit 1");
  t.match(
    admin.err,
    /^svc: Nothing answers at http:\/\/127\.0\.0\.1:1 \(connection refused\): is `svc up` running at http:\/\/127\.0\.0\.1:1\?/,
    "admin command",
  );
});
