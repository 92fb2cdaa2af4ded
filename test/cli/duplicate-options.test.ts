// An option given twice is a usage error (exit 2) naming it, before any request or start-up:
// `--port 1 --port 2` or `--version 1 --version 2` used to keep the last value silently.
// Options that take a list (`--namespace`) may still repeat.
import test from "tape";
import { svc } from "./helpers.js";

// SVC_GATE_URL at a port where nothing listens: a command that got past its checks fails with exit 1
const env = { SVC_GATE_URL: "http://127.0.0.1:9", SVC_API_KEY: "svc_live_x", SVC_GATE_ENGINE_SERVICE_KEY: "k".repeat(64) };

const cases: Array<[string[], string]> = [
  [["up", "--port", "0", "--port", "0", "--engine-port", "0"], "--port"],
  [["up", "--data", "/nonexistent/a", "--data", "/nonexistent/b", "--port", "0", "--engine-port", "0"], "--data"],
  [["get", "default", "a", "--version", "1", "--version", "2"], "--version"],
  [["serve", "default", "a", "-o", "x.npy", "--output", "y.npy"], "--output"],
  [["serve", "default", "a", "-o", "x.npy", "-o", "y.npy"], "-o"],
  [["topk", "default", "a", "--k", "3", "--k", "5"], "--k"],
  [["put", "default", "a", "f.npy", "--tolerance", "0.1", "--tolerance=0.2"], "--tolerance"],
  [["search", "default", "--filter", "{}", "--filter", '{"a":1}'], "--filter"],
  [["ls", "default", "--prefix", "a", "--prefix", "b"], "--prefix"],
  [["tenant", "create", "acme", "--plan", "pro", "--plan", "starter"], "--plan"],
  [["import", "default", ".", "--concurrency", "2", "--concurrency", "3"], "--concurrency"],
];

test("an option given twice is a usage error naming it", async (t) => {
  for (const [argv, flag] of cases) {
    const r = await svc(argv, env, { stopSignal: Promise.resolve("SIGTERM") });
    t.equal(r.code, 2, `${argv.join(" ")}: exit 2`);
    t.match(r.err, new RegExp(`^svc: ${flag} is given more than once; give it once\\.\\n`), r.err.trim().split("\n")[0]);
  }
});

test("options that take a list may repeat; --help twice is still help", async (t) => {
  const r = await svc(["tenant", "create", "acme", "--namespace", "a", "--namespace", "b"], env);
  t.notEqual(r.code, 2, `--namespace twice is not a usage error: ${r.err.trim()}`);
  const h = await svc(["get", "--help", "--help"], env);
  t.equal(h.code, 0, "help");
});

test("a short option's value after '=' and a malformed --email are usage errors before any request", async (t) => {
  const o = await svc(["serve", "default", "a", "-o=x.npy"], env);
  t.equal(o.code, 2, "-o=x.npy: exit 2");
  t.match(o.err, /^svc: -o takes its value after a space \(-o x\.npy\), not after '='\.\n/, o.err.trim().split("\n")[0]);
  for (const email of ["", "not-an-address", "a@b"]) {
    const r = await svc(["tenant", "create", "acme", `--email=${email}`], env);
    t.equal(r.code, 2, `--email=${email}: exit 2, before the request (the gateway URL answers nothing)`);
    t.match(r.err, /^svc: --email '[^']*' is not an e-mail address\.\n/, r.err.trim().split("\n")[0]);
  }
  const ok = await svc(["tenant", "create", "acme", "--email", "ops@example.com"], env);
  t.equal(ok.code, 1, "a well-formed address passes the check and reaches the (absent) gateway: exit 1");
});
