// What the compact tests delete and keep, written through a store view: `gone` deleted, `keep`
// live, `twice` with version 1 deleted and version 2 live with the same bytes (only the version
// record is purged), and `idem` put idempotently (key "once", request hash "hash").
import type { Store } from "../../lib/store/index.js";
import { sql } from "./pg-db.js";

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

/** Rows of `table` in the PostgreSQL store at `url` (from freshStoreUrl). */
export const rowCount = async (url: string, table: string): Promise<number> =>
  Number((await sql<{ n: string }>(url, `SELECT count(*) AS n FROM ${table}`))[0]!.n);

/** `copies` more deleted keys, gone-1 to gone-N, each with the head and version of `gone` (made by SQL, at once). */
export async function copyGone(url: string, copies: number): Promise<void> {
  await sql(url, `INSERT INTO heads SELECT tenant_id, namespace, key || '-' || g, value FROM heads, generate_series(1, ${copies}) g WHERE key = 'gone'`);
  await sql(
    url,
    `INSERT INTO versions SELECT tenant_id, namespace, key || '-' || g, version, value FROM versions, generate_series(1, ${copies}) g WHERE key = 'gone'`,
  );
}
