// The client address a request is throttled by: the socket's peer, or, when the peer is a
// trusted proxy (SVC_GATE_TRUSTED_PROXIES), the address that proxy names in X-Forwarded-For.
// The header is read from its right end, past every trusted hop, as nginx's real_ip_recursive
// and express's `trust proxy` do: entries left of the first untrusted one were written by the
// client and prove nothing.
import type { IncomingMessage } from "node:http";
import { BlockList, isIP } from "node:net";
import { plain } from "../http/connection-cap.js";

const CIDR = /^(.+)\/(\d{1,3})$/;

/** Whether `s` is an IP address or a CIDR range (address/prefix length) of one. */
export function isAddressOrRange(s: string): boolean {
  const m = CIDR.exec(s);
  if (!m) return isIP(s) !== 0;
  const v = isIP(m[1]!);
  const bits = Number(m[2]);
  return v !== 0 && bits <= (v === 4 ? 32 : 128);
}

/** The set of trusted proxy addresses; `entries` are checked by isAddressOrRange (config.ts). */
export function trustedProxies(entries: readonly string[]): BlockList | null {
  if (entries.length === 0) return null;
  const list = new BlockList();
  for (const e of entries) {
    const m = CIDR.exec(e);
    const addr = plain(m ? m[1]! : e);
    const type = isIP(addr) === 4 ? "ipv4" : "ipv6";
    if (m) list.addSubnet(addr, Number(m[2]), type);
    else list.addAddress(addr, type);
  }
  return list;
}

export const trusts = (list: BlockList, addr: string): boolean => {
  const v = isIP(addr);
  return v !== 0 && list.check(addr, v === 4 ? "ipv4" : "ipv6");
};

/**
 * The address of the client that sent `req`. An X-Forwarded-For entry that is not an address
 * ends the walk: the hop that passed it on is taken as the client.
 */
export function clientAddress(req: IncomingMessage, trusted: BlockList | null): string {
  let addr = plain(req.socket.remoteAddress ?? "");
  if (trusted === null || !trusts(trusted, addr)) return addr;
  const raw = req.headers["x-forwarded-for"];
  if (raw === undefined) return addr;
  const hops = (Array.isArray(raw) ? raw.join(",") : raw).split(",");
  // A header longer than any honest chain of proxies is read from its right end only.
  for (let i = hops.length - 1, seen = 0; i >= 0 && seen < 32; i--, seen++) {
    const hop = plain(hops[i]!.trim());
    if (isIP(hop) === 0) return addr;
    addr = hop;
    if (!trusts(trusted, hop)) return addr;
  }
  return addr;
}
