// What the compact tests delete and keep, written through a store view: `gone` deleted, `keep`
// live, `twice` with version 1 deleted and version 2 live with the same bytes (only the version
// record is purged), and `idem` put idempotently (key "once", request hash "hash").
import type test from "tape";
import type { Store } from "../../lib/store/index.js";
import type { StorageBackend } from "../../lib/store/backend.js";
import { rulesAt } from "../../lib/store/maintenance.js";
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

/** The rows of each of `tables` in the schema `url` works in, by table name. */
export async function rowCounts<T extends string>(url: string, ...tables: T[]): Promise<Record<T, number>> {
  const out = {} as Record<T, number>;
  for (const table of tables) out[table] = await rowCount(url, table);
  return out;
}

/** `copies` more deleted keys, gone-1 to gone-N, each with the head and version of `gone` (made by SQL, at once). */
export async function copyGone(url: string, copies: number): Promise<void> {
  await sql(url, `INSERT INTO heads SELECT tenant_id, namespace, key || '-' || g, value FROM heads, generate_series(1, ${copies}) g WHERE key = 'gone'`);
  await sql(
    url,
    `INSERT INTO versions SELECT tenant_id, namespace, key || '-' || g, version, value FROM versions, generate_series(1, ${copies}) g WHERE key = 'gone'`,
  );
}

const bytesOf = async (s: Store, key: string): Promise<Buffer> => Buffer.from((await s.serve("ns", key)).data as Uint8Array);

/**
 * Three writers, each with keys of its own, putting and deleting three shared payloads (`ops`
 * operations each, drawn from `seed`) while `compacting` runs compactions until they finish; a
 * last compact at `now`, then every key, and every version still stored, must read back as its
 * writer left it. Returns the versions kept and the keys left live.
 */
export async function writersBeside(
  t: test.Test,
  s: Store,
  compacting: (writing: () => boolean) => Promise<number>,
  o: { ops: number; seed: number; now: number },
): Promise<{ kept: number; live: number }> {
  const contents = ["P", "Q", "R"].map(payload);
  let seed = o.seed;
  const next = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return Math.floor(seed / 65536) % n;
  };
  const last = new Map<string, number | null>();
  const versions = new Map<string, { key: string; version: number; c: number }>();
  const writer = async (w: number) => {
    for (let i = 0; i < o.ops; i++) {
      const key = `w${w}-${next(4)}`;
      if (next(3) === 0 && last.get(key) != null) {
        await s.delete("ns", key);
        last.set(key, null);
      } else {
        const c = next(contents.length);
        const version = (await s.put("ns", key, contents[c]!)).version;
        versions.set(`${key}@${version}`, { key, version, c });
        last.set(key, c);
      }
    }
  };
  let writing = true;
  const runs = compacting(() => writing);
  await Promise.all([writer(0), writer(1), writer(2)]);
  writing = false;
  const n = await runs;
  t.ok(n >= 1, `compact ran ${n} times beside the writers`);
  await s.compact({ now: o.now });
  const wrong: string[] = [];
  for (const [key, c] of last) {
    if (c === null) {
      const code = await s.get("ns", key).then(
        () => "present",
        (e: { code?: string }) => e.code ?? "error",
      );
      if (code !== "not_found") wrong.push(`${key}: ${code} after its delete`);
    } else if (!(await bytesOf(s, key)).equals(contents[c]!)) wrong.push(`${key}: other bytes`);
  }
  t.deepEqual(wrong, [], `every one of ${last.size} keys as its writer left it`);
  let kept = 0;
  const broken: string[] = [];
  for (const { key, version, c } of versions.values()) {
    // a purged version is not_found; a version whose payload was removed says so
    const got = await s.serve("ns", key, { version }).then(
      (r) => Buffer.from(r.data as Uint8Array),
      (e: { code?: string; message?: string }) => (/payload/.test(e.message ?? "") ? e.message! : (e.code ?? "error")),
    );
    if (got instanceof Buffer) {
      kept++;
      if (!got.equals(contents[c]!)) broken.push(`${key}@${version}: other bytes`);
    } else if (got !== "not_found") broken.push(`${key}@${version}: ${got}`);
  }
  t.deepEqual(broken, [], `of ${versions.size} versions written, the ${kept} kept read back their bytes`);
  return { kept, live: [...last.values()].filter((c) => c !== null).length };
}

/**
 * Payload X, of a key deleted long enough before `now`, is named again by a put of key b in
 * `backend`'s compact, between its reading of the versions and its removals (its test hook):
 * X must be kept, and b read back. `other` keeps payload Y. Payload Z, stored for the first
 * time by a put of key c at the same point, is named by no version compact read: it must be
 * kept too.
 */
export async function payloadNamedAgain(t: test.Test, s: Store, backend: StorageBackend, now: number): Promise<void> {
  await s.put("ns", "a", payload("X"));
  await s.delete("ns", "a");
  await s.put("ns", "other", payload("Y"));
  let named = false;
  const r = await backend.compact!(rulesAt(now), {
    // X has no version left when compact reads the versions; this put names it again (same bytes)
    beforePayloads: async () => {
      await s.put("ns", "b", payload("X"));
      await s.put("ns", "c", payload("Z"));
      named = true;
    },
  });
  t.ok(named, "the puts ran between compact's reading of the versions and its removals");
  t.deepEqual(r, { versions_purged: 1, keys_purged: 1, payloads_purged: 0 }, "a's version and key purged, payloads X and Z kept");
  t.ok((await bytesOf(s, "b")).equals(payload("X")), "b reads back its bytes");
  t.ok((await bytesOf(s, "c")).equals(payload("Z")), "c, stored during the compaction, reads back its bytes");
}
