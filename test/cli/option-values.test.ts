// Bad option values are usage errors (exit 2, one sentence and the hint) for every command that
// takes them, checked before any request (the gateway address here answers nothing, so a
// value that reached the network would exit 1): the compression flags of put and import,
// --filter and --prefix, --slice, serve's -o, and keys that no HTTP header can carry.
import test from "tape";
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { svc } from "./helpers.js";
import { parseSlice } from "../../bin/cli/data.js";
import { UsageError } from "../../bin/cli/common.js";
import { writeNpy } from "../../lib/npy.js";

const DEAD = "http://127.0.0.1:1";
const env = { SVC_API_KEY: "svc_live_x", SVC_GATE_URL: DEAD };

test("cli: bad option values exit 2 with one sentence and the command's hint, before any request", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-optvals-"));
  try {
    const f = join(dir, "a.npy");
    await writeFile(f, writeNpy({ dtype: "float32", shape: [4, 4], data: new Float32Array(16) }));
    const src = join(dir, "src");
    await mkdir(src);
    const bigMeta = JSON.stringify({ a: "x".repeat(70_000) });
    const cases: Array<[string[], NodeJS.ProcessEnv, RegExp]> = [];
    for (const cmd of [
      ["put", "ns", "k", f],
      ["import", "ns", src],
    ]) {
      cases.push(
        [[...cmd, "--tolerance", "-1"], env, /^--tolerance: tolerance must be at least 0\.$/],
        [[...cmd, "--tolerance", "1"], env, /^--tolerance: tolerance must be less than 1\.$/],
        [[...cmd, "--tolerance", "abc"], env, /^--tolerance must be a number\.$/],
        [[...cmd, "--codec", "foo"], env, /^--codec must be one of auto, tt, pred, lossless\.$/],
        [[...cmd, "--max-abs-error", "-1"], env, /^--max-abs-error: max_abs_error must be at least 0\.$/],
        [[...cmd, "--max-rank", "5000"], env, /^--max-rank: max_rank must be at most 1024\.$/],
      );
    }
    cases.push(
      [["put", "ns", "k", f, "--meta", bigMeta], env, /^--meta: metadata must be at most 64 KiB serialised\.$/],
      [["put", "ns", "k", f, "--if-version", "-1"], env, /^--if-version must be a whole number between 0 and /],
      [
        ["topk", "ns", "k", "--filter", '{"a": {"$regex": "x"}}'],
        env,
        /^--filter: filter\.a\.\$regex: unknown operator '\$regex' \(the filter language is in docs\/api\.md\)\.$/,
      ],
      [["search", "ns", "--filter", '{"$or": []}'], env, /^--filter: filter\.\$or must be a non-empty list of filters \(the filter language/],
      [["ls", "ns", "--prefix", "a b"], env, /^--prefix 'a b': prefix may contain only A-Z a-z 0-9 - _ \. : \/ @ =\.$/],
      [["search", "ns", "--prefix", "é"], env, /^--prefix 'é': prefix may contain only/],
      [["serve", "ns", "k", "-o", join(dir, "o.npy"), "--slice", ""], env, /^--slice is empty: give one start:stop per dimension/],
      [
        ["serve", "ns", "k", "-o", join(dir, "o.npy"), "--slice", ","],
        env,
        /^--slice ',' has an empty dimension 0: write : for a whole dimension \(--slice :\)\.$/,
      ],
      [["serve", "ns", "k", "-o", join(dir, "o.npy"), "--slice", "0:8,,1"], env, /^--slice '0:8,,1' has an empty dimension 1: .*\(--slice 0:8,:,1\)\.$/],
      [["serve", "ns", "k", "-o", join(dir, "o.npy"), "--version", "0"], env, /^--version must be a whole number between 1 and /],
      [["serve", "ns", "run/field", "-o", dir], env, new RegExp(`^-o ${dir} is a directory: name the file to write, for example -o ${dir}/field\\.npy\\.$`)],
      [
        ["serve", "ns", "k", "-o", join(dir, "no", "such", "x.npy")],
        env,
        new RegExp(
          `^-o ${dir}/no/such/x\\.npy: the directory ${dir}/no/such does not exist; create it first \\(mkdir -p ${dir}/no/such\\) or write elsewhere\\.$`,
        ),
      ],
      [["serve", "ns", "k", "-o", join(f, "x.npy")], env, new RegExp(`^-o ${f}/x\\.npy: ${f} is not a directory\\.$`)],
      [["get", "ns", "k", "--version", "x"], env, /^--version must be a whole number/],
      [["topk", "ns", "k", "--k", "0"], env, /^--k must be a whole number between 1 and 1000\.$/],
      [
        ["get", "ns", "k"],
        { ...env, SVC_API_KEY: "ключ" },
        /^SVC_API_KEY holds a character that no svc key has \(non-ASCII or a control character\): export the tenant key as/,
      ],
      [["put", "ns", "k", f], { ...env, SVC_API_KEY: "svc_live_x\n" }, /^SVC_API_KEY holds a character that no svc key has/],
      [["usage", "--mine"], { ...env, SVC_API_KEY: "ключ" }, /^SVC_API_KEY holds a character that no svc key has/],
      [
        ["tenant", "list"],
        { SVC_GATE_URL: DEAD, SVC_GATE_ENGINE_SERVICE_KEY: "ключ".repeat(10) },
        /^SVC_GATE_ENGINE_SERVICE_KEY holds a character that no svc key has/,
      ],
    );
    for (const [argv, e, re] of cases) {
      const r = await svc(argv, e);
      const shown = argv.map((a) => (a.length > 40 ? `${a.slice(0, 20)}…` : a)).join(" ");
      t.equal(r.code, 2, `svc ${shown} exits 2`);
      const [first, second, ...more] = r.err.split("\n");
      t.match(first!, /^svc: /, "prefixed 'svc:'");
      t.match(first!.slice(5), re, `stderr: ${first!.slice(0, 200)}`);
      t.equal(second, `Run 'svc ${argv[0]} --help' for usage.`, "the command's hint");
      t.deepEqual(more, [""], "nothing else on stderr");
      t.equal(r.out, "", "nothing on stdout");
    }
    const keyFile = join(dir, "data");
    await mkdir(keyFile);
    await writeFile(join(keyFile, "service.key"), "ключ".repeat(10) + "\n");
    const fromFile = await svc(["tenant", "list", "--data", keyFile], { SVC_GATE_URL: DEAD });
    t.equal(fromFile.code, 2, "a service.key that no header can carry: exit 2");
    t.match(
      fromFile.err,
      /^svc: \S+service\.key holds a character that no svc key has .*; set SVC_GATE_ENGINE_SERVICE_KEY instead\.\n/,
      fromFile.err.split("\n")[0],
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("cli: --slice: one trailing comma is numpy's a[0:8,] (the rest whole); an empty spec or middle part is refused", (t) => {
  t.deepEqual(
    parseSlice("0:8,", [64, 64]),
    [
      [0, 8],
      [0, 64],
    ],
    "0:8, on 64x64 selects [8, 64]",
  );
  t.deepEqual(
    parseSlice("-1,", [4, 5, 6]),
    [
      [3, 4],
      [0, 5],
      [0, 6],
    ],
    "-1, on 4x5x6",
  );
  t.deepEqual(parseSlice("2,", [4]), [[2, 3]], "a trailing comma on a 1-d entry");
  t.deepEqual(parseSlice(" 1:3 , ", [4, 4]), [
    [1, 3],
    [0, 4],
  ]);
  for (const [s, re] of [
    ["", /^--slice is empty/],
    ["  ", /^--slice is empty/],
    [",", /^--slice ',' has an empty dimension 0/],
    [",0:2", /^--slice ',0:2' has an empty dimension 0: write : for a whole dimension \(--slice :,0:2\)\.$/],
    ["0:8,,", /^--slice '0:8,,' has an empty dimension 1/],
    ["0:8, ,1", /has an empty dimension 1/],
    ["0:2,0:2,", /^--slice has 2 dimensions but the entry has 1\.$/],
  ] as const) {
    let e: unknown;
    try {
      parseSlice(s, s.startsWith("0:2,0:2") ? [8] : [8, 8, 8]);
    } catch (x) {
      e = x;
    }
    t.ok(e instanceof UsageError && re.test((e as Error).message), `'${s}': ${(e as Error)?.message}`);
  }
  t.end();
});
