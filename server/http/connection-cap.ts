// A cap on the connections one client address holds open at once, for the engine and the
// gateway. Node accepts every connection and keeps one that sends nothing until its header
// timeout (60 s, looked at every 30 s), so one address could take every file descriptor of the
// process and lock every other client out. Past the cap, a new connection from that address is
// closed as soon as it is accepted, before anything is read or allocated for it; the connections
// it already has, and every other address, are served as before. Addresses `exempt` says yes to
// (the gateway's trusted proxies, which carry many clients' connections) have no cap.
import type { Server } from "node:http";
import { isIP, type Socket } from "node:net";

/** `s` without the IPv4-mapped IPv6 prefix, so that ::ffff:10.0.0.1 counts as 10.0.0.1. */
export const plain = (s: string): string => (s.toLowerCase().startsWith("::ffff:") && isIP(s.slice(7)) === 4 ? s.slice(7) : s);

/**
 * Caps the connections of `server` at `perAddress` per client address (0: no cap).
 * `onRefused` is called for each connection closed on arrival.
 */
export function capConnections(server: Server, perAddress: number, exempt: ((addr: string) => boolean) | null, onRefused: () => void = () => {}): void {
  if (perAddress <= 0) return;
  const open = new Map<string, number>();
  server.on("connection", (sock: Socket) => {
    const addr = plain(sock.remoteAddress ?? "");
    if (exempt !== null && exempt(addr)) return;
    const n = (open.get(addr) ?? 0) + 1;
    if (n > perAddress) {
      sock.destroy();
      onRefused();
      return;
    }
    open.set(addr, n);
    sock.once("close", () => {
      const left = open.get(addr)! - 1;
      if (left === 0) open.delete(addr);
      else open.set(addr, left);
    });
  });
}
