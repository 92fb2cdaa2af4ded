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
