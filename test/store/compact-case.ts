// What the compact tests delete and keep, written through a store view: `gone` deleted, `keep`
// live, `twice` with version 1 deleted and version 2 live with the same bytes (only the version
// record is purged), and `idem` put idempotently (key "once", request hash "hash").
import type { Store } from "../../lib/store/index.js";

/** 64 repeats of `s`: a payload of its own for each letter. */
export const payload = (s: string): Buffer => Buffer.from(s.repeat(64));

export async function fillCompactCase(v: Store): Promise<void> {
  await v.put("ns", "gone", payload("A"));
  await v.delete("ns", "gone");
  await v.put("ns", "keep", payload("B"));
  await v.put("ns", "twice", payload("C"));
  await v.delete("ns", "twice");
  await v.put("ns", "twice", payload("C"));
  await v.idempotent("once", "hash").put("ns", "idem", payload("D"));
}
