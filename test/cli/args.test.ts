// The svc program's surface without servers: --help everywhere, usage errors exit 2 with
// one sentence, failures of the work exit 1 without a stack trace (unless debug), the
// --slice syntax, and the real binary's exit codes.
import test from "tape";
import { spawnSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { svc } from "./helpers.js";
import { parseSlice, preparePut, parseMeta } from "../../bin/cli/data.js";
import { UsageError } from "../../bin/cli/common.js";
import { writeNpy } from "../../lib/npy.js";

const COMMANDS = ["up", "engine", "gateway", "tenant", "usage", "reload", "put", "get", "ls", "rm", "serve", "search", "topk", "import"];

test("cli: svc --help and every command's --help print usage and exit 0", async (t) => {
  const top = await svc(["--help"]);
  t.equal(top.code, 0, "svc --help exits 0");
  for (const c of COMMANDS) t.ok(top.out.includes(c), `top-level help mentions ${c}`);
  for (const c of COMMANDS) {
    const r = await svc([c, "--help"]);
    t.equal(r.code, 0, `svc ${c} --help exits 0`);
    t.match(r.out, /Usage|usage|svc /, `svc ${c} --help prints usage`);
    t.equal(r.err, "", `svc ${c} --help writes nothing to stderr`);
  }
  t.end();
});

test("cli: usage errors exit 2 with one sentence on stderr and a hint", async (t) => {
  const cases: Array<[string[], NodeJS.ProcessEnv, RegExp]> = [
    [[], {}, /Missing command\./],
    [["frobnicate"], {}, /Unknown command 'frobnicate'\./],
    [["put", "ns", "key"], { SVC_API_KEY: "k" }, /Missing argument: expected NS KEY FILE\./],
    [["get", "ns", "k", "extra"], { SVC_API_KEY: "k" }, /Unexpected argument 'extra'\./],
    [["ls", "ns", "--bogus"], { SVC_API_KEY: "k" }, /Unknown option '--bogus'/],
    [["put", "ns", "k", "f", "--dtype", "complex64"], { SVC_API_KEY: "k" }, /--dtype must be one of float32/],
    [["put", "ns", "k", "f", "--shape", "2,x"], { SVC_API_KEY: "k" }, /--shape must be a comma list/],
    [["put", "ns", "k", "f", "--meta", "[1]"], { SVC_API_KEY: "k" }, /--meta must be a JSON object/],
    [["put", "ns", "k", "f", "--max-rank", "0"], { SVC_API_KEY: "k" }, /--max-rank must be a whole number/],
    [["put", "bad ns", "k", "f"], { SVC_API_KEY: "k" }, /Invalid namespace 'bad ns'/],
    [["get", "ns", "a//b"], { SVC_API_KEY: "k" }, /Invalid key 'a\/\/b'/],
    [["get", "ns", "k ".repeat(5000)], { SVC_API_KEY: "k" }, /^svc: Invalid key '(k ){29}k\.\.\. \(10000 characters\): /m],
    [["get", "ns", "k"], {}, /SVC_API_KEY is not set/],
    [["serve", "ns", "k"], { SVC_API_KEY: "k" }, /-o OUT\.npy is required/],
    [["ls", "ns"], { SVC_API_KEY: "k", SVC_GATE_URL: "ftp://x" }, /SVC_GATE_URL 'ftp:\/\/x' is not an http\(s\) URL/],
    [["tenant"], {}, /Missing subcommand/],
    [["tenant", "explode", "x"], {}, /Unknown tenant subcommand 'explode'/],
    [["tenant", "create", "Bad_ID!"], { SVC_GATE_ENGINE_SERVICE_KEY: "x".repeat(32) }, /Invalid tenant id 'Bad_ID!'/],
    [["tenant", "create", "acme", "--plan", "gold"], { SVC_GATE_ENGINE_SERVICE_KEY: "x".repeat(32) }, /Unknown plan 'gold'/],
    [["tenant", "create", "acme", "--quota", "5"], { SVC_GATE_ENGINE_SERVICE_KEY: "x".repeat(32) }, /apply only to plan enterprise/],
    [
      ["tenant", "create", "acme", "--plan", "enterprise", "--rate-limit", "5"],
      { SVC_GATE_ENGINE_SERVICE_KEY: "x".repeat(32) },
      /--rate-limit must be REQUESTS\/WINDOW_S/,
    ],
    [["tenant", "list", "--data", "/nonexistent-svc-dir"], {}, /No service key: set SVC_GATE_ENGINE_SERVICE_KEY/],
    [["usage", "--period", "2026-13"], { SVC_GATE_ENGINE_SERVICE_KEY: "x".repeat(32) }, /--period must be YYYY-MM/],
    [["up", "--port", "70000"], {}, /--port must be a whole number between 0 and 65535/],
    [["up", "--redis", "http://x"], {}, /--redis must be a redis:\/\//],
    [["import", "ns", "/nonexistent-svc-dir"], { SVC_API_KEY: "k" }, /does not exist/],
  ];
  for (const [argv, env, re] of cases) {
    const r = await svc(argv, env);
    t.equal(r.code, 2, `svc ${argv.join(" ")} exits 2`);
    const [first, second, ...more] = r.err.split("\n");
    t.match(first!, re, `stderr: ${first}`);
    t.match(first!, /^svc: .*\.?$/, "one sentence prefixed 'svc:'");
    t.match(second!, /Run 'svc.*--help' for usage\./, "hint line");
    t.deepEqual(more, [""], "nothing else on stderr");
  }
  t.end();
});

test("cli: a failure of the work exits 1 with one sentence and no stack; SVC_ENGINE_LOG_LEVEL=debug adds the stack", async (t) => {
  const env = { SVC_API_KEY: "svc_live_x", SVC_GATE_URL: "http://127.0.0.1:1" };
  const r = await svc(["get", "ns", "k"], env);
  t.equal(r.code, 1, "exit 1");
  t.match(
    r.err,
    /^svc: Nothing answers at http:\/\/127\.0\.0\.1:1 \(connection refused\): is `svc up` running at http:\/\/127\.0\.0\.1:1\? \(SVC_GATE_URL sets another address\.\)\n$/,
    `one line: ${r.err.trim()}`,
  );
  t.notOk(r.err.includes("svc_live_x"), "the key is not printed");
  const d = await svc(["get", "ns", "k"], { ...env, SVC_ENGINE_LOG_LEVEL: "debug" });
  t.equal(d.code, 1, "exit 1 in debug");
  t.match(d.err, /\n\s+at /, "stack trace in debug");
  const adm = await svc(["tenant", "list"], { SVC_GATE_URL: "http://127.0.0.1:1", SVC_GATE_ENGINE_SERVICE_KEY: "s".repeat(40) });
  t.equal(adm.code, 1, "admin call to a dead gateway exits 1");
  t.match(adm.err, /^svc: Nothing answers at http:\/\/127\.0\.0\.1:1 \(connection refused\): is `svc up` running at/, "admin error sentence");
  const dir = await mkdtemp(join(tmpdir(), "svc-cli-"));
  try {
    const missing = await svc(["put", "ns", "k", join(dir, "nope.npy")], env);
    t.equal(missing.code, 1, "missing file exits 1");
    t.match(missing.err, /^svc: No such file or directory: .*nope\.npy\.\n$/, "missing file sentence");
    await writeFile(
      join(dir, "bad.npy"),
      Buffer.concat([Buffer.from("\x93NUMPY\x01\x00", "latin1"), Buffer.from([20, 0]), Buffer.from("{'descr': '|O'}     \n")]),
    );
    const bad = await svc(["put", "ns", "k", join(dir, "bad.npy")], env);
    t.equal(bad.code, 1, "corrupt .npy exits 1");
    t.match(bad.err, /^svc: Object arrays/, `corrupt .npy sentence: ${bad.err.trim()}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  t.end();
});

test("cli: --slice resolves python-style ranges against the entry's shape", (t) => {
  t.deepEqual(
    parseSlice("0:16,:,:", [32, 8, 8]),
    [
      [0, 16],
      [0, 8],
      [0, 8],
    ],
    "0:16,:,:",
  );
  t.deepEqual(
    parseSlice("2", [4, 5]),
    [
      [2, 3],
      [0, 5],
    ],
    "bare index, missing trailing dim",
  );
  t.deepEqual(
    parseSlice("-2:,:-1", [4, 5]),
    [
      [2, 4],
      [0, 4],
    ],
    "negative indices",
  );
  t.deepEqual(parseSlice("1:100", [4]), [[1, 4]], "stop clipped to the dimension");
  for (const [s, re] of [
    ["0:16,:,:,:", /4 dimensions but the entry has 3/],
    ["5:2", /selects nothing/],
    ["a:b", /is not start:stop/],
    ["0:4:2", /steps are not supported/],
    ["9", /selects nothing/],
  ] as const) {
    const e = (() => {
      try {
        parseSlice(s, [8, 8, 8]);
      } catch (x) {
        return x;
      }
    })();
    t.ok(e instanceof UsageError && re.test((e as Error).message), `${s}: ${(e as Error)?.message}`);
  }
  t.end();
});

test("cli: put takes dtype and shape from a .npy header; raw bytes need --shape unless bytes; mismatches are usage errors", (t) => {
  const npy = writeNpy({ dtype: "int16", shape: [2, 3], data: new Int16Array([1, 2, 3, 4, 5, 6]) });
  const p = preparePut(npy, undefined, undefined, "a.npy");
  t.deepEqual([p.dtype, p.shape, p.data.length], ["int16", [2, 3], 12], "from the header");
  t.deepEqual(preparePut(npy, "int16", [2, 3], "a.npy").shape, [2, 3], "agreeing flags accepted");
  t.throws(() => preparePut(npy, "float32", undefined, "a.npy"), /--dtype float32 disagrees with a\.npy, whose header says int16/, "dtype mismatch");
  t.throws(() => preparePut(npy, undefined, [6], "a.npy"), /--shape 6 disagrees/, "shape mismatch");
  const scalar = writeNpy({ dtype: "float64", shape: [], data: new Float64Array([3]) });
  t.deepEqual(preparePut(scalar, undefined, undefined, "s.npy").shape, [1], "0-d array stored as shape [1]");
  const raw = Buffer.from("hello");
  t.throws(
    () => preparePut(raw, undefined, undefined, "r.f32"),
    /r\.f32 is not a \.npy file: describe its raw data with --dtype and --shape .*, or pass --bytes/,
    "raw data without flags is refused",
  );
  t.deepEqual(
    [preparePut(raw, undefined, undefined, "r", true).dtype, preparePut(raw, undefined, undefined, "r", true).shape],
    ["bytes", undefined],
    "--bytes",
  );
  t.deepEqual(preparePut(raw, "bytes", undefined, "r").dtype, "bytes", "--dtype bytes");
  t.throws(() => preparePut(raw, "float32", undefined, "r.bin"), /--shape is required for raw float32 data/, "raw float needs shape");
  t.deepEqual(parseMeta('{"a":1}'), { a: 1 }, "--meta object");
  t.end();
});

test("cli: the real binary exits 2 on a usage error and 0 on --help (spawned with node --import tsx)", (t) => {
  const bin = new URL("../../bin/svc.ts", import.meta.url).pathname;
  const bad = spawnSync(process.execPath, ["--import", "tsx", bin, "put"], { encoding: "utf8", env: { ...process.env, SVC_API_KEY: "" } });
  t.equal(bad.status, 2, "exit 2");
  t.match(bad.stderr, /^svc: Missing argument: expected NS KEY FILE\.\nRun 'svc put --help' for usage\.\n$/, "stderr");
  const ok = spawnSync(process.execPath, ["--import", "tsx", bin, "--help"], { encoding: "utf8" });
  t.equal(ok.status, 0, "exit 0");
  t.match(ok.stdout, /^svc — tensor-train storage service/, "help text");
  t.end();
});

test("cli: put from a pipe or device reads no more than --dtype and --shape describe, nor past the limit", async (t) => {
  const env = { SVC_GATE_URL: "http://127.0.0.1:1", SVC_API_KEY: "svc_live_x" };
  // an endless source: refused after the bytes the flags describe, before any request
  const zero = await svc(["put", "ns", "k", "/dev/zero", "--dtype", "float32", "--shape", "1000,1000"], env);
  t.equal(zero.code, 2, "/dev/zero: exit 2");
  t.equal(
    zero.err.split("\n")[0],
    "svc: /dev/zero is not a regular file and sends more than the 4000000 bytes that --dtype float32 --shape 1000,1000 describe; nothing was sent.",
    "one sentence naming the source and the size",
  );
  // without flags: the limit of a whole read, here made small to be reached
  const { readInput } = await import("../../bin/cli/common.js");
  try {
    await readInput("/dev/zero", 3 * 1024 * 1024);
    t.fail("read to the end of /dev/zero");
  } catch (e) {
    t.ok(e instanceof UsageError, "past the limit: a usage error");
    t.equal(
      (e as Error).message,
      `/dev/zero is not a regular file and sent more than ${3 * 1024 * 1024} bytes, the most svc put reads from a pipe or device; nothing was sent.`,
    );
  }
  // `-`: standard input (here a socket, as Node gives a child), within the same limits; the
  // right size goes on to the put (refused only because nothing answers at 127.0.0.1:1)
  const stdinPut = (input: Buffer, ...flags: string[]) =>
    spawnSync(process.execPath, ["--import", "tsx", new URL("../../bin/svc.ts", import.meta.url).pathname, "put", "ns", "k", "-", ...flags], {
      input,
      encoding: "utf8",
      env: { ...process.env, ...env },
    });
  const over = stdinPut(Buffer.alloc(5 * 1024 * 1024), "--dtype", "uint8", "--shape", "10");
  t.equal(over.status, 2, "-: past what the flags describe, exit 2");
  t.equal(
    over.stderr.split("\n")[0],
    "svc: Standard input sends more than the 10 bytes that --dtype uint8 --shape 10 describe; nothing was sent.",
    "-: the sentence",
  );
  const fits = stdinPut(Buffer.alloc(40), "--dtype", "float32", "--shape", "10");
  t.equal(fits.status, 1, "-: what fits is read and put");
  t.match(fits.stderr, /^svc: Nothing answers at http:\/\/127\.0\.0\.1:1/, `-: the put went on to the gateway (${fits.stderr.trim().slice(0, 120)})`);
  const raw = stdinPut(Buffer.alloc(8));
  t.equal(raw.status, 2, "-: raw bytes without flags");
  t.match(raw.stderr, /^svc: standard input is not a \.npy file: describe its raw data with --dtype and --shape/, "-: named standard input");
  // a pipe that ends is read whole, a .npy header included (a shell pipe: Node's own child
  // stdio is a socket, which /dev/stdin cannot open), and a regular file as before
  const npy = writeNpy({ dtype: "int16", shape: [2, 3], data: new Int16Array([1, 2, 3, 4, 5, 6]) });
  const dir = await mkdtemp(join(tmpdir(), "svc-cli-"));
  try {
    await writeFile(join(dir, "a.npy"), npy);
    const common = JSON.stringify(new URL("../../bin/cli/common.ts", import.meta.url).href);
    const script = `import { readInput } from ${common}; process.stdout.write((await readInput("/dev/stdin", 12 + 1024 * 1024)).toString("hex"));`;
    const piped = spawnSync("sh", ["-c", `cat "$1" | "$2" --import tsx --input-type=module -e "$3"`, "sh", join(dir, "a.npy"), process.execPath, script], {
      encoding: "utf8",
    });
    t.equal(piped.stdout, npy.toString("hex"), `a pipe that ends: every byte${piped.stderr ? ` (${piped.stderr.trim().slice(0, 300)})` : ""}`);
    t.deepEqual(await readInput(join(dir, "a.npy"), 1), npy, "a regular file is read whole whatever the limit");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
