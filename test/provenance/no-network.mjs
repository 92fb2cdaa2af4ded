// Preload for the verifier tests: any attempt to open a network connection or resolve a name
// ends the process with exit 97 and a line on stderr, even if the caller would catch an error.
import dns from "node:dns";
import net from "node:net";
import { syncBuiltinESMExports } from "node:module";

const refuse = (what) => () => {
  process.stderr.write(`NETWORK ACCESS ATTEMPTED: ${what}\n`);
  process.exit(97);
};
net.Socket.prototype.connect = refuse("net.Socket.connect");
net.connect = net.createConnection = refuse("net.connect");
dns.lookup = refuse("dns.lookup");
dns.resolve = refuse("dns.resolve");
dns.promises.lookup = refuse("dns.promises.lookup");
dns.promises.resolve = refuse("dns.promises.resolve");
syncBuiltinESMExports();
