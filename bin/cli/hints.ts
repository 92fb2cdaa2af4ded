// The way out added to a data command's refusal: a namespace outside the key's list gets the
// nearest one the tenant has ("did you mean"), an unknown key the reminder that rotation and
// deactivation end a key. Loaded only when such a refusal happens.
import { ForbiddenError, SvcError, UnauthorizedError } from "../../lib/errors.js";
import type { Io } from "./common.js";

/** Edit distance (insertions, deletions, substitutions, transpositions of neighbours). */
export function distance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/** The candidate nearest to `typed` when it is near enough to be a typo (case ignored), else null. */
export function nearest(typed: string, candidates: string[]): string | null {
  let best: string | null = null;
  let bestD = Infinity;
  for (const c of candidates) {
    const dd = distance(typed.toLowerCase(), c.toLowerCase());
    if (dd < bestD) {
      best = c;
      bestD = dd;
    }
  }
  return best !== null && bestD <= Math.max(2, Math.floor(typed.length / 3)) ? best : null;
}

const SHOWN = 10;

/** `e` with the way out appended, or `e` itself when there is none to add. */
export async function withHint(e: SvcError, io: Io): Promise<SvcError> {
  if (e instanceof UnauthorizedError && /^Invalid API key\.?$/.test(e.message)) {
    const h = new UnauthorizedError(
      "Invalid API key: the gateway does not know the key in SVC_API_KEY (a key stops working once 'svc tenant rotate-key' replaces it or the tenant is deactivated); export the tenant's current key.",
    );
    Object.assign(h.extra, e.extra);
    return h;
  }
  const m = e instanceof ForbiddenError ? /^(Tenant \S+ is not allowed to access namespace (\S+))\.$/.exec(e.message) : null;
  if (!m) return e;
  let namespaces: string[];
  try {
    const { fetchAccount } = await import("./account.js");
    namespaces = (await fetchAccount(io)).namespaces;
  } catch {
    return e; // the refusal as it came is still the answer
  }
  const guess = nearest(m[2]!, namespaces);
  const list = namespaces.slice(0, SHOWN).join(", ") + (namespaces.length > SHOWN ? `, … (${namespaces.length} in all)` : "");
  const h = new ForbiddenError(`${m[1]} (its namespaces: ${list || "none"})${guess ? `; did you mean ${guess}?` : "; 'svc tenant add-namespace' adds one."}`);
  Object.assign(h.extra, e.extra);
  return h;
}
