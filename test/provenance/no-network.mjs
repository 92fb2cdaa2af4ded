// Preload for the verifier tests: any attempt to open a network connection or resolve a name
// ends the process with exit 97 and a line on stderr, even if the caller would catch an error.
import dns from "node:dns";
import net from "node:net";
import { syncBuiltinESMExports } from "node:module";

const refuse = (what) => () => {
  process.stderr.write(`NETWORK ACCESS ATTEMPTED: ${what}\n`);
  process.exit(97);
};
// tsx's loader (the CLIs run through it when dist/ is older than the sources) talks to its
// parent over a local pipe (<tmpdir>/tsx-<uid>/<pid>.pipe): that is no network, and allowed
const tsxPipe = (args) => {
  const a = args[0];
  const path = typeof a === "string" ? a : Array.isArray(a) ? a[0]?.path : a?.path;
  return typeof path === "string" && /\/tsx-\d+\/\d+\.pipe$/.test(path);
};
const guard = (what, original) =>
  function (...args) {
    if (tsxPipe(args)) return original.apply(this, args);
    return refuse(what)();
  };
net.Socket.prototype.connect = guard("net.Socket.connect", net.Socket.prototype.connect);
net.connect = net.createConnection = guard("net.connect", net.createConnection);
dns.lookup = refuse("dns.lookup");
dns.resolve = refuse("dns.resolve");
dns.promises.lookup = refuse("dns.promises.lookup");
dns.promises.resolve = refuse("dns.promises.resolve");
syncBuiltinESMExports();
