// PostgreSQL implementation of the storage interface, with node-postgres and its pool.
// Several engines on several machines share one database; the database serialises them.
//
// Tables (docs/store.md "PostgreSQL"), every one keyed with tenant_id first and none referring
// across tenants, so that the database can be distributed by tenant:
//   heads(tenant_id, namespace, key) -> value          a head (msgpack, as on LMDB)
//   versions(tenant_id, namespace, key, version) -> value   version records, written once
//   idempotency(tenant_id, key) -> value               stored responses of idempotent writes
//   payloads(tenant_id, sha256) -> bytes, chunks       one row per payload, per tenant
//   payload_chunks(tenant_id, sha256, seq) -> data     its bytes, CHUNK_BYTES per row
//   svc_schema(id = 1) -> version                      the schema version of these tables
//
// A write transaction: BEGIN, a shared advisory lock (taken exclusively by a transaction that
// lists payloads, and by the compact of earlier releases, which a database may still see during
// an upgrade), the declared rows read with FOR UPDATE, the body, its writes, COMMIT. A row the body read as absent is INSERTed, so
// two engines creating the same key (or writing the same version) collide on the primary key;
// the loser rolls back and runs again on what the winner committed. Serialisation failures
// and deadlocks are retried the same way.
import pg from "pg";
import { Packr } from "msgpackr";
import { StorageFullError, StoreUnavailableError, SvcError, ValidationError } from "../errors.js";
import { joinPaced } from "./pace.js";
import type { CompactResult } from "./types.js";
import {
  checkDeclared,
  checkDeclaredRange,
  compareKeys,
  type CompactHooks,
  type CompactRules,
  type PayloadRef,
  type RecordEntry,
  type RecordKey,
  type StorageBackend,
  type TxReads,
  type WriteTx,
} from "./backend.js";

/** The schema version this code writes; a database of a higher one is refused. */
export const SCHEMA_VERSION = 1;
/** Payload bytes per row of payload_chunks: no row is larger than this. */
export const CHUNK_BYTES = 1024 * 1024;
/** Advisory lock key shared by writers (shared) and compact (exclusive). */
const GC_LOCK = 0x5356_4301;
/** Advisory lock key held while the schema is created or migrated. */
const MIGRATE_LOCK = 0x5356_4302;
const MAX_ATTEMPTS = 20;
/** SQLSTATEs after which a transaction is run again: unique_violation, serialization_failure, deadlock_detected. */
const RETRY = new Set(["23505", "40001", "40P01"]);

// Each migration takes the schema from version i to i + 1.
const MIGRATIONS: string[] = [
  `CREATE TABLE heads (
     tenant_id text COLLATE "C" NOT NULL, namespace text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL,
     value bytea NOT NULL, PRIMARY KEY (tenant_id, namespace, key));
   CREATE TABLE versions (
     tenant_id text COLLATE "C" NOT NULL, namespace text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL,
     version bigint NOT NULL, value bytea NOT NULL, PRIMARY KEY (tenant_id, namespace, key, version));
   CREATE TABLE idempotency (
     tenant_id text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL, value bytea NOT NULL, PRIMARY KEY (tenant_id, key));
   CREATE TABLE payloads (
     tenant_id text COLLATE "C" NOT NULL, sha256 text COLLATE "C" NOT NULL, bytes bigint NOT NULL, chunks integer NOT NULL,
     PRIMARY KEY (tenant_id, sha256));
   CREATE TABLE payload_chunks (
     tenant_id text COLLATE "C" NOT NULL, sha256 text COLLATE "C" NOT NULL, seq integer NOT NULL, data bytea NOT NULL,
     PRIMARY KEY (tenant_id, sha256, seq));`,
];

interface Family {
  table: string;
  cols: string[];
  types: string[];
}
const FAMILIES: Record<string, Family> = {
  h: { table: "heads", cols: ["tenant_id", "namespace", "key"], types: ["text", "text", "text"] },
  v: { table: "versions", cols: ["tenant_id", "namespace", "key", "version"], types: ["text", "text", "text", "bigint"] },
  i: { table: "idempotency", cols: ["tenant_id", "key"], types: ["text", "text"] },
};

/** The family of a key; a range bound may be a prefix of its columns. */
function familyOf(key: RecordKey): Family {
  const f = FAMILIES[key[0] as string];
  if (!f || key.length > f.cols.length + 1) throw new Error(`The PostgreSQL backend stores no record key ${JSON.stringify(key)}.`);
  return f;
}

/** The family of a whole key (every column given). */
function fullFamily(key: RecordKey): Family {
  const f = familyOf(key);
  if (key.length !== f.cols.length + 1) throw new Error(`The PostgreSQL backend stores no record key ${JSON.stringify(key)}.`);
  return f;
}

const packr = new Packr({ useRecords: false, moreTypes: false });
// a copy: msgpackr returns a view of a buffer that later packs reuse
const encodeValue = (v: unknown): Buffer => Buffer.from(packr.pack(v));
const decodeValue = (b: Buffer): unknown => packr.unpack(b);

const enc = (key: RecordKey): string => JSON.stringify(key);

type Queryable = pg.Pool | pg.PoolClient;

/** A value as an SQL literal (quoted by node-postgres's escapeLiteral; bytes as hex). */
function literal(c: pg.PoolClient, v: unknown): string {
  if (v === null || v === undefined) return "NULL";
  if (typeof v === "number") {
    if (!Number.isFinite(v)) throw new Error("A non-finite number cannot be written.");
    return String(v);
  }
  if (typeof v === "boolean") return v ? "TRUE" : "FALSE";
  if (typeof v === "string") return c.escapeLiteral(v);
  if (v instanceof Uint8Array) return c.escapeLiteral(`\\x${Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("hex")}`);
  if (Array.isArray(v)) return `ARRAY[${v.map((x) => literal(c, x)).join(", ")}]`;
  throw new Error("A value of this type cannot be written.");
}

/** The rows of the cursor `name`, declared on `c`, `page` at a time (as arrays) until it is exhausted. */
async function* fetchPages(c: pg.PoolClient, name: string, page: number): AsyncIterable<unknown[][]> {
  for (;;) {
    const r = await c.query<unknown[]>({ text: `FETCH ${page} FROM ${name}`, rowMode: "array" });
    if (r.rows.length > 0) yield r.rows;
    if (r.rows.length < page) break;
  }
}

/**
 * A statement with its parameters written in as literals: several such statements go in one
 * simple query, one round trip (the extended protocol takes one statement per round trip).
 */
function inline(c: pg.PoolClient, text: string, values: unknown[]): string {
  return text.replace(/\$(\d+)/g, (_m, n: string) => literal(c, values[Number(n) - 1]));
}

/** Parameters and CTEs per statement of a WriteBatch (PostgreSQL allows 65,535 parameters). */
const MAX_PARAMS = 30_000;
const MAX_CTES = 400;
/** Writes of at most this many payload and record bytes go with their COMMIT in one round trip. */
const INLINE_BYTES = 256 * 1024;
/**
 * Binary parameter bytes of one statement, unless pinned together: node-postgres serialises a
 * statement in one piece on the event loop, so a large payload goes as a statement per chunk.
 */
const MAX_STATEMENT_BYTES = CHUNK_BYTES;

/**
 * Write statements gathered into data-modifying CTEs (WITH w0 AS (...), w1 AS (...) SELECT 1),
 * sent as few statements as the limits allow. Each `$` of a statement is its next parameter.
 */
class WriteBatch {
  #ctes: string[] = [];
  #values: unknown[] = [];
  #n = 0;
  /** Statements still to come that must share the current statement (chunks of its payload row). */
  #pinned = 0;
  /** Bytes of binary parameters in the current statement. */
  #bytes = 0;
  #done: { text: string; values: unknown[] }[] = [];
  constructor(readonly client: pg.PoolClient) {}

  /** Adds a statement; the next `keepWith` statements go into the same SQL statement. Returns its CTE name. */
  add(sql: string, values: unknown[], keepWith = 0): string {
    let bytes = 0;
    for (const v of values) if (v instanceof Uint8Array) bytes += v.byteLength;
    if (this.#pinned > 0) this.#pinned--;
    else if (
      this.#ctes.length > 0 &&
      (this.#values.length + values.length > MAX_PARAMS || this.#ctes.length >= MAX_CTES || (this.#bytes > 0 && this.#bytes + bytes > MAX_STATEMENT_BYTES))
    )
      this.#cut();
    this.#bytes += bytes;
    this.#pinned += keepWith;
    let i = 0;
    const text = sql.replace(/\$(?![0-9])/g, () => `$${this.#values.length + ++i}`);
    this.#values.push(...values);
    const name = `w${this.#n++}`;
    this.#ctes.push(`${name} AS (${text})`);
    return name;
  }

  #cut(): void {
    this.#done.push({ text: `WITH ${this.#ctes.join(",\n")} SELECT 1`, values: this.#values });
    this.#ctes = [];
    this.#values = [];
    this.#bytes = 0;
  }

  /**
   * Sends the statements and COMMIT: in one simple query (one round trip) when the bytes to
   * write are small; larger payloads go as binary parameters, a statement per round trip,
   * rather than as hex text twice their size.
   */
  async commit(): Promise<void> {
    if (this.#ctes.length > 0) this.#cut();
    const done = this.#done;
    this.#done = [];
    let bytes = 0;
    for (const st of done) for (const v of st.values) if (v instanceof Uint8Array) bytes += v.byteLength;
    if (bytes <= INLINE_BYTES) {
      await this.client.query([...done.map((st) => inline(this.client, st.text, st.values)), "COMMIT"].join(";\n"));
      return;
    }
    for (const st of done) await this.client.query(st.text, st.values);
    await this.client.query("COMMIT");
  }
}

/** An entry's head and one version record (the latest without a version) in one statement. */
const GET_ENTRY_SQL = `SELECT h.value AS head, (SELECT v.value FROM versions v WHERE v.tenant_id = $1 AND v.namespace = $2 AND v.key = $3
    AND ($4::bigint IS NULL OR v.version = $4::bigint) ORDER BY v.version DESC LIMIT 1) AS rec
   FROM heads h WHERE h.tenant_id = $1 AND h.namespace = $2 AND h.key = $3`;

/**
 * Entry reads that arrived together, in one statement (one round trip, one snapshot taken after
 * the last of them arrived): row i answers the i-th (tenant, namespace, key, version) of the arrays.
 */
const GET_ENTRIES_SQL = `SELECT q.i::integer AS i, h.value AS head, (SELECT v.value FROM versions v WHERE v.tenant_id = q.t AND v.namespace = q.n AND v.key = q.k
    AND (q.ver IS NULL OR v.version = q.ver) ORDER BY v.version DESC LIMIT 1) AS rec
   FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS q(t, n, k, ver, i)
   JOIN heads h ON h.tenant_id = q.t AND h.namespace = q.n AND h.key = q.k`;
/**
 * Rows per statement of a range read (a listing, search or top-K of a namespace, a migration):
 * heads carry up to 64 KiB of metadata each, so a page holds at most about 16 MiB.
 */
export const RANGE_PAGE_ROWS = 256;
/** Entry reads in one statement at most. */
const MAX_ENTRY_BATCH = 256;

interface EntryAsk {
  tenant: string;
  ns: string;
  key: string;
  version: number | null;
  resolve: (e: { head: unknown; record: unknown }) => void;
  reject: (e: unknown) => void;
}

/** Answers one read with its row (none: no such entry); a row that cannot be decoded fails that read alone. */
function settle(a: EntryAsk, row: { head: Buffer; rec: Buffer | null } | undefined): void {
  try {
    a.resolve(row === undefined ? { head: undefined, record: undefined } : { head: decodeValue(row.head), record: row.rec ? decodeValue(row.rec) : undefined });
  } catch (e) {
    a.reject(e);
  }
}

async function q<R extends pg.QueryResultRow = pg.QueryResultRow>(c: Queryable, text: string, values: unknown[] = []): Promise<R[]> {
  // text results (node-postgres decodes binary-format rows as UTF-8 text, which corrupts
  // bytea): bytea arrives as hex and pg-types turns it into a Buffer natively
  const r = await c.query<R>(text, values);
  return r.rows;
}

/** SQL for `cols >= bound` (lower) or `cols < bound` (upper), over the bound's prefix of the key columns. */
function bound(f: Family, key: RecordKey, op: ">=" | "<" | ">", values: unknown[]): string {
  const parts = key.slice(1);
  if (parts.length === 0) return "true";
  const cols = f.cols.slice(0, parts.length);
  const ph = parts.map((p, i) => {
    values.push(p);
    return `$${values.length}::${f.types[i]}`;
  });
  return `(${cols.join(", ")}) ${op} (${ph.join(", ")})`;
}

function rowKey(f: Family, family: string, row: Record<string, unknown>): RecordKey {
  // bigint columns arrive as decimal text
  return [family, ...f.cols.map((c, i) => (f.types[i] === "bigint" ? Number(row[c]) : (row[c] as string)))];
}

/** Where the URL points, for messages (never the password). */
/** Default bound of one statement and of waiting for a connection (SVC_ENGINE_STORE_TIMEOUT_MS). */
export const DEFAULT_TIMEOUT_MS = 5000;

// Connection lost, refused or timed out, server shutting down or starting, too many clients:
// the database, not the request, failed; the request may be sent again.
const UNAVAILABLE_ERRNO = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN"]);
const UNAVAILABLE_MESSAGE =
  /Connection terminated|connection timeout|timeout exceeded when trying to connect|Query read timeout|Client has encountered a connection error|Connection closed|not queryable/i;

/**
 * The store error a PostgreSQL failure is: storage_full for a full disk (53100) or the
 * database out of resources, store_unavailable for a lost or refused connection, a restart,
 * a statement past its time; undefined for anything else (a bug or a conflict, kept as it is).
 */
export function pgFailure(e: unknown): SvcError | undefined {
  if (e instanceof SvcError) return undefined;
  const err = e as { code?: unknown; message?: unknown } | null;
  const code = typeof err?.code === "string" ? err.code : "";
  const message = typeof err?.message === "string" ? err.message : "";
  if (code === "53100") return new StorageFullError("The database has no disk space left for this write; retry after space is freed.");
  if (code === "57014") return new StoreUnavailableError("The database did not answer in time (SVC_ENGINE_STORE_TIMEOUT_MS); retry later.");
  // read_only_sql_transaction: a hot standby, or a primary being failed over; reads go on
  if (code === "25006")
    return new StoreUnavailableError("The database is read-only (a standby, or a failover under way), so nothing can be written; retry later.", 5);
  if (code.startsWith("08") || code.startsWith("57P") || code.startsWith("53") || UNAVAILABLE_ERRNO.has(code) || UNAVAILABLE_MESSAGE.test(message))
    return new StoreUnavailableError("The database is unreachable; retry later.");
  return undefined;
}

/** Rethrows a PostgreSQL failure as the store error it is. */
function rethrow(e: unknown): never {
  throw pgFailure(e) ?? e;
}

function where(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || 5432}${u.pathname}`;
  } catch {
    return "the configured address";
  }
}

/**
 * A write transaction's payload writes, added to its batch: each payload stored (its row, then
 * its chunks) or removed (its chunks, then its row).
 */
function addPayloadWrites(w: WriteBatch, payloadOps: Iterable<{ tenant: string; id: string; bytes?: Uint8Array }>): void {
  // payload rows in one order, so that two batches naming the same payloads lock them alike
  const ops = [...payloadOps].sort((a, b) => (a.tenant === b.tenant ? (a.id < b.id ? -1 : a.id > b.id ? 1 : 0) : a.tenant < b.tenant ? -1 : 1));
  for (const op of ops) {
    if (op.bytes) {
      const bytes = op.bytes;
      const chunks = Math.max(1, Math.ceil(bytes.byteLength / CHUNK_BYTES));
      const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      const chunk = (seq: number) => buf.subarray(seq * CHUNK_BYTES, Math.min(buf.byteLength, (seq + 1) * CHUNK_BYTES));
      // a payload the tenant holds already has its row rewritten as it is (a new row version):
      // compact removes an unused payload only while its row is the one it saw unused, so a
      // payload this put names again after compact looked is kept (PostgresBackend.compact)
      const row = `INSERT INTO payloads (tenant_id, sha256, bytes, chunks) VALUES ($::text, $::text, $::bigint, $::integer)
        ON CONFLICT (tenant_id, sha256) DO UPDATE SET bytes = payloads.bytes RETURNING 1`;
      if (chunks === 1) {
        // the chunk after its payload row (in the same statement); a chunk the tenant holds
        // already (or one a concurrent put is inserting: its row waits) is deduplicated
        const p = w.add(row, [op.tenant, op.id, bytes.byteLength, chunks], 1);
        w.add(
          `INSERT INTO payload_chunks (tenant_id, sha256, seq, data) SELECT $::text, $::text, $::integer, $::bytea WHERE EXISTS (SELECT 1 FROM ${p}) ON CONFLICT DO NOTHING`,
          [op.tenant, op.id, 0, chunk(0)],
        );
      } else {
        // a statement per chunk (MAX_STATEMENT_BYTES); a chunk of a payload the tenant holds
        // already (or that a concurrent put is inserting: its row waits) is left as it is
        w.add(row, [op.tenant, op.id, bytes.byteLength, chunks]);
        for (let seq = 0; seq < chunks; seq++) {
          w.add("INSERT INTO payload_chunks (tenant_id, sha256, seq, data) VALUES ($::text, $::text, $::integer, $::bytea) ON CONFLICT DO NOTHING", [
            op.tenant,
            op.id,
            seq,
            chunk(seq),
          ]);
        }
      }
    } else {
      w.add("DELETE FROM payload_chunks WHERE tenant_id = $::text AND sha256 = $::text", [op.tenant, op.id]);
      w.add("DELETE FROM payloads WHERE tenant_id = $::text AND sha256 = $::text", [op.tenant, op.id]);
    }
  }
}

/**
 * Creates the tables or migrates them to SCHEMA_VERSION (once, under an advisory lock, when
 * several engines start together), and refuses a database of a newer schema.
 */
async function migrate(pool: pg.Pool, url: string): Promise<void> {
  const client = await pool.connect();
  // a database already at this schema needs no lock and no DDL: one read, which also lets a
  // read-only database (a hot standby, a primary being failed over) be opened and read
  try {
    const r = await client.query<{ version: number }>("SELECT version FROM svc_schema WHERE id = 1");
    if (r.rows[0]?.version === SCHEMA_VERSION) {
      client.release();
      return;
    }
  } catch (e) {
    // no svc_schema table yet (a new database): created below; anything else is the open's error
    if ((e as { code?: unknown }).code !== "42P01") {
      client.release(true);
      throw e;
    }
  }
  try {
    await client.query("BEGIN");
    await client.query("SELECT pg_advisory_xact_lock($1)", [MIGRATE_LOCK]);
    await client.query(`CREATE TABLE IF NOT EXISTS svc_schema (id integer PRIMARY KEY CHECK (id = 1), version integer NOT NULL)`);
    const r = await client.query<{ version: number }>("SELECT version FROM svc_schema WHERE id = 1");
    const have = r.rows[0]?.version ?? 0;
    if (have > SCHEMA_VERSION)
      throw new ValidationError(
        `The PostgreSQL database at ${where(url)} holds store schema version ${have}, newer than version ${SCHEMA_VERSION} that this svc-tensor knows: upgrade svc-tensor before connecting it.`,
        "url",
      );
    for (let v = have; v < SCHEMA_VERSION; v++) await client.query(MIGRATIONS[v]!);
    if (have < SCHEMA_VERSION)
      await client.query("INSERT INTO svc_schema (id, version) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version", [SCHEMA_VERSION]);
    await client.query("COMMIT");
  } catch (e) {
    await client.query("ROLLBACK").catch(() => undefined);
    client.release(true);
    throw e;
  }
  client.release();
}

export class PostgresBackend implements StorageBackend {
  readonly name = "postgres" as const;
  readonly payloadScope = "tenant" as const;
  readonly ownPayloads = true;
  readonly #pool: pg.Pool;
  /** Schema checked (or being checked); null until a connection succeeds (lazy open). */
  #ready: Promise<void> | null;
  readonly #url: string;
  readonly #timeoutMs: number;

  /** Entry-read statements in flight at once: half the pool, the rest left to writes. */
  readonly #maxReads: number;

  private constructor(pool: pg.Pool, url: string, ready: boolean, opts: { timeoutMs: number; rangePageRows?: number }) {
    this.#pool = pool;
    this.#maxReads = Math.max(1, Math.floor(pool.options.max / 2));
    this.#rangeSlots = Math.max(1, Math.floor(pool.options.max / 4));
    this.#rangePageRows = opts.rangePageRows ?? RANGE_PAGE_ROWS;
    this.#timeoutMs = opts.timeoutMs;
    this.#url = url;
    this.#ready = ready ? Promise.resolve() : null;
  }

  /** Waits for the schema check of a lazy open, trying it again after a failed one. */
  #whenReady(): Promise<void> {
    return (this.#ready ??= migrate(this.#pool, this.#url).catch((e) => {
      this.#ready = null;
      rethrow(e);
    }));
  }

  /** One round trip to the database within the store's timeout (engine /health). */
  async ping(): Promise<boolean> {
    try {
      await this.#whenReady();
      await this.#pool.query("SELECT 1");
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Connects and migrates (see migrate). `lazy`: a database that cannot be reached yet is not an
   * error; every call answers StoreUnavailableError until it can be, then migrates first.
   */
  static async open(url: string, opts: { poolSize?: number; timeoutMs?: number; lazy?: boolean; rangePageRows?: number } = {}): Promise<PostgresBackend> {
    const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const pool = new pg.Pool({
      connectionString: url,
      max: opts.poolSize ?? 10,
      idleTimeoutMillis: 30_000,
      // every wait bounded: for a connection, for a statement on the server, for its answer
      connectionTimeoutMillis: timeoutMs,
      statement_timeout: timeoutMs,
      query_timeout: timeoutMs + 1000,
    });
    // an idle connection that breaks (database restart) is replaced on next use, not a crash
    pool.on("error", () => undefined);
    // a connection checked out when the server goes away emits "error" on its client too: the
    // query in flight fails with it, and an unheard event would end the process
    pool.on("connect", (client) => void client.on("error", () => undefined));
    if (opts.lazy) {
      // the engine starts without its database and answers store_unavailable until it is there
      const backend = new PostgresBackend(pool, url, false, { timeoutMs, rangePageRows: opts.rangePageRows });
      try {
        await backend.#whenReady();
      } catch (e) {
        if (!(e instanceof StoreUnavailableError || e instanceof StorageFullError)) {
          await pool.end().catch(() => undefined);
          throw e;
        }
      }
      return backend;
    }
    try {
      await migrate(pool, url);
    } catch (e) {
      await pool.end().catch(() => undefined);
      if ((e as { code?: unknown }).code === "25006")
        throw new ValidationError(
          `The PostgreSQL database at ${where(url)} is read-only (a standby?) and its tables must first be created or migrated: connect to the primary.`,
          "url",
        );
      throw e instanceof ValidationError || !pgFailure(e)
        ? e
        : new ValidationError(`Cannot connect to PostgreSQL at ${where(url)}: ${(e as Error).message}.`, "url");
    }
    return new PostgresBackend(pool, url, true, { timeoutMs, rangePageRows: opts.rangePageRows });
  }

  /** A query on the pool, once the schema is ready, its failures as store errors. */
  async #q<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values: unknown[] = []): Promise<R[]> {
    await this.#whenReady();
    return q<R>(this.#pool, text, values).catch(rethrow);
  }

  async get(key: RecordKey): Promise<unknown> {
    const f = fullFamily(key);
    const values = key.slice(1);
    const rows = await this.#q<{ value: Buffer }>(
      `SELECT value FROM ${f.table} WHERE ${f.cols.map((c, i) => `${c} = $${i + 1}::${f.types[i]}`).join(" AND ")}`,
      values,
    );
    return rows.length ? decodeValue(rows[0]!.value) : undefined;
  }

  /**
   * One snapshot (a listing never sees part of a batch put, as on LMDB), read a page at a time so
   * that the rows held at once stay bounded whatever the range's size (a namespace's heads carry
   * up to 64 KiB of metadata each). A range of at most one page is one statement on the pool, no
   * connection held while the caller works through the rows. A larger one is a cursor in a
   * read-only repeatable-read transaction on a connection of its own, fetched page by page as the
   * caller asks; at most `#rangeSlots` such ranges hold a connection at once, so that reads,
   * writes and the payload fetches of a top-K always find one.
   */
  async *range(start: RecordKey, end: RecordKey): AsyncIterable<RecordEntry> {
    const f = familyOf(start);
    // the leading columns both bounds fix (a namespace's heads: tenant and namespace) are not
    // sent back: a top-K reads 10,000 heads, and each column of each row costs
    let fixed = 0;
    while (fixed < f.cols.length - 1 && fixed + 1 < start.length && fixed + 1 < end.length && start[fixed + 1] === end[fixed + 1]) fixed++;
    const prefix = start.slice(0, fixed + 1);
    const cols = f.cols.slice(fixed);
    const numeric = f.types.slice(fixed).map((t) => t === "bigint");
    const values: unknown[] = [];
    const sql = `SELECT ${cols.join(", ")}, value FROM ${f.table} WHERE ${bound(f, start, ">=", values)} AND ${bound(f, end, "<", values)} ORDER BY ${f.cols.join(", ")}`;
    const n = cols.length;
    const entries = function* (rows: unknown[][]): Iterable<RecordEntry> {
      for (const row of rows) {
        const key: (string | number)[] = [...prefix];
        for (let i = 0; i < n; i++) key.push(numeric[i] ? Number(row[i]) : (row[i] as string));
        yield { key, value: decodeValue(row[n] as Buffer) };
      }
    };
    const page = this.#rangePageRows;
    await this.#whenReady();
    const first = await this.#pool.query<unknown[]>({ text: `${sql} LIMIT ${page + 1}`, values, rowMode: "array" }).catch(rethrow);
    if (first.rows.length <= page) {
      yield* entries(first.rows);
      return;
    }
    // more than a page: read again from the start in a snapshot of its own, a page at a time
    await this.#takeRangeSlot();
    let client: pg.PoolClient | undefined;
    let open = false;
    let broken = false;
    try {
      client = await this.#pool.connect().catch(rethrow);
      const c = client;
      open = true;
      await c.query(["BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", `DECLARE svc_range NO SCROLL CURSOR FOR ${inline(c, sql, values)}`].join(";\n"));
      for await (const rows of fetchPages(c, "svc_range", page)) yield* entries(rows);
      await c.query("COMMIT");
      open = false;
    } catch (e) {
      if (pgFailure(e)) broken = true;
      rethrow(e);
    } finally {
      // also when the caller stopped early (a break out of its loop) or failed
      if (client && open && !broken) await client.query("ROLLBACK").catch(() => void (broken = true));
      client?.release(broken);
      this.#giveRangeSlot();
    }
  }

  /** Rows per statement of a range read. */
  readonly #rangePageRows: number;
  /** Ranges that may hold a connection at once (larger than a page), and those waiting for one. */
  readonly #rangeSlots: number;
  #rangesOpen = 0;
  readonly #rangeWaiting: (() => void)[] = [];

  /** Waits for a range slot, at most the store's timeout (a range read inside another's loop could otherwise wait on itself). */
  #takeRangeSlot(): Promise<void> {
    if (this.#rangesOpen < this.#rangeSlots) {
      this.#rangesOpen++;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const go = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        const i = this.#rangeWaiting.indexOf(go);
        if (i >= 0) this.#rangeWaiting.splice(i, 1);
        reject(new StoreUnavailableError("The database connections for large reads are all busy; retry later."));
      }, this.#timeoutMs);
      this.#rangeWaiting.push(go);
    });
  }

  #giveRangeSlot(): void {
    const next = this.#rangeWaiting.shift();
    // the slot passes to the next waiter as it is
    if (next) next();
    else this.#rangesOpen--;
  }

  async getPayload(tenant: string, id: string): Promise<Buffer | undefined> {
    return (await this.getPayloads(tenant, [id])).get(id);
  }

  async getPayloads(tenant: string, ids: readonly string[]): Promise<Map<string, Buffer>> {
    const out = new Map<string, Buffer>();
    if (ids.length === 0) return out;
    const rows = await this.#q<{ sha256: string; bytes: string; chunks: number; seq: number; data: Buffer }>(
      `SELECT p.sha256, p.bytes, p.chunks, c.seq, c.data FROM payloads p JOIN payload_chunks c USING (tenant_id, sha256)
        WHERE p.tenant_id = $1 AND p.sha256 = ANY($2::text[]) ORDER BY p.sha256, c.seq`,
      [tenant, ids],
    );
    for (let i = 0; i < rows.length;) {
      const { sha256, chunks } = rows[i]!;
      const bytes = Number(rows[i]!.bytes);
      const parts: Buffer[] = [];
      for (; i < rows.length && rows[i]!.sha256 === sha256; i++) parts.push(rows[i]!.data);
      // a payload whose chunks are not all there is missing, never a short read
      if (parts.length !== chunks) continue;
      if (parts.length === 1) {
        if (parts[0]!.byteLength === bytes) out.set(sha256, parts[0]!);
        continue;
      }
      // joined chunk by chunk, giving the event loop a turn between slices (a 100 MiB payload
      // would otherwise be one copy of the whole)
      if (parts.reduce((n, p) => n + p.byteLength, 0) !== bytes) continue;
      out.set(sha256, await joinPaced(parts, bytes));
    }
    return out;
  }

  /**
   * One statement: the head and the version record from the same snapshot. Without a version,
   * the highest stored one is the head's latest (both are written together). The reads of one
   * turn of the event loop go together, in one statement sent in its check phase; while half
   * the pool holds reads, more wait and go together next. A read is always sent after it
   * arrived, so it sees every write committed before it.
   */
  async getEntry(tenant: string, ns: string, key: string, version?: number): Promise<{ head: unknown; record: unknown }> {
    await this.#whenReady();
    return new Promise((resolve, reject) => {
      this.#asks.push({ tenant, ns, key, version: version ?? null, resolve, reject });
      this.#scheduleReads();
    });
  }

  /** Entry reads waiting to be sent, and the statements of them in flight. */
  readonly #asks: EntryAsk[] = [];
  #readsInFlight = 0;
  #readsScheduled = false;

  /**
   * Sends the waiting reads in the check phase of this turn of the event loop, after the poll
   * phase has read every request that arrived: the reads of one turn go together.
   */
  #scheduleReads(): void {
    if (this.#readsScheduled) return;
    this.#readsScheduled = true;
    setImmediate(() => {
      this.#readsScheduled = false;
      this.#sendReads();
    });
  }

  #sendReads(): void {
    while (this.#asks.length > 0 && this.#readsInFlight < this.#maxReads) {
      const batch = this.#asks.splice(0, MAX_ENTRY_BATCH);
      this.#readsInFlight++;
      void this.#readEntries(batch).finally(() => {
        this.#readsInFlight--;
        if (this.#asks.length > 0) this.#scheduleReads();
      });
    }
  }

  async #readEntries(asks: EntryAsk[]): Promise<void> {
    try {
      if (asks.length === 1) {
        // a named statement: each connection parses and plans it once, not on every read
        const a = asks[0]!;
        const r = await this.#pool.query<{ head: Buffer; rec: Buffer | null }>({
          name: "svc_get_entry",
          text: GET_ENTRY_SQL,
          values: [a.tenant, a.ns, a.key, a.version],
        });
        settle(a, r.rows[0]);
        return;
      }
      const r = await this.#pool.query<{ i: number; head: Buffer; rec: Buffer | null }>({
        name: "svc_get_entries",
        text: GET_ENTRIES_SQL,
        values: [asks.map((a) => a.tenant), asks.map((a) => a.ns), asks.map((a) => a.key), asks.map((a) => a.version)],
      });
      const found = new Array<{ head: Buffer; rec: Buffer | null } | undefined>(asks.length);
      for (const row of r.rows) found[row.i - 1] = row;
      asks.forEach((a, i) => settle(a, found[i]));
    } catch (e) {
      const failure = pgFailure(e) ?? e;
      for (const a of asks) a.reject(failure);
    }
  }

  async hasPayload(tenant: string, id: string): Promise<boolean> {
    return (await this.#q("SELECT 1 FROM payloads WHERE tenant_id = $1 AND sha256 = $2", [tenant, id])).length > 0;
  }

  async transact<T>(reads: TxReads, fn: (tx: WriteTx) => T): Promise<T> {
    await this.#whenReady();
    for (let attempt = 1; ; attempt++) {
      const client = await this.#pool.connect().catch(rethrow);
      let broken = false;
      try {
        return await this.#attempt(client, reads, fn);
      } catch (e) {
        const failure = pgFailure(e);
        // a connection that failed or timed out mid-transaction is not given to the next caller
        if (failure) broken = true;
        else await client.query("ROLLBACK").catch(() => void (broken = true));
        if (failure) throw failure;
        const code = (e as { code?: string }).code;
        if (!(typeof code === "string" && RETRY.has(code)) || attempt >= MAX_ATTEMPTS) throw e;
        // another engine committed first: back off a little (jittered) and run again
        await new Promise((r) => setTimeout(r, Math.random() * Math.min(50, 2 * attempt)));
      } finally {
        client.release(broken);
      }
    }
  }

  async #attempt<T>(c: pg.PoolClient, txReads: TxReads, fn: (tx: WriteTx) => T): Promise<T> {
    // one round trip: BEGIN, the advisory lock (a transaction that lists payloads excludes
    // every writer while it decides), the declared rows FOR UPDATE, the payload list
    const reads: { family: string; f: Family; sql: string }[] = [];
    const declaredKeys = new Map<string, RecordKey[]>();
    for (const key of txReads.keys ?? []) {
      const fam = key[0] as string;
      fullFamily(key);
      const list = declaredKeys.get(fam) ?? [];
      list.push(key);
      declaredKeys.set(fam, list);
    }
    for (const [family, keys] of declaredKeys) {
      const f = FAMILIES[family]!;
      const sql =
        keys.length === 1
          ? inline(
              c,
              `SELECT ${f.cols.join(", ")}, value FROM ${f.table} WHERE ${f.cols.map((col, i) => `${col} = $${i + 1}::${f.types[i]}`).join(" AND ")} FOR UPDATE`,
              keys[0]!.slice(1) as unknown[],
            )
          : inline(
              c,
              `SELECT ${f.cols.join(", ")}, value FROM ${f.table} WHERE (${f.cols.join(", ")}) IN (SELECT * FROM unnest(${f.types.map((t, i) => `$${i + 1}::${t}[]`).join(", ")})) ORDER BY ${f.cols.join(", ")} FOR UPDATE`,
              f.cols.map((_, i) => keys.map((k) => k[i + 1])),
            );
      reads.push({ family, f, sql });
    }
    for (const [start, end] of txReads.ranges ?? []) {
      const f = familyOf(start);
      const values: unknown[] = [];
      const sql = `SELECT ${f.cols.join(", ")}, value FROM ${f.table} WHERE ${bound(f, start, ">=", values)} AND ${bound(f, end, "<", values)} ORDER BY ${f.cols.join(", ")} FOR UPDATE`;
      reads.push({ family: start[0] as string, f, sql: inline(c, sql, values) });
    }
    const statements = ["BEGIN", `SELECT pg_advisory_xact_lock${txReads.payloads ? "" : "_shared"}(${GC_LOCK})`, ...reads.map((r) => r.sql)];
    if (txReads.payloads) statements.push("SELECT tenant_id, sha256 FROM payloads ORDER BY tenant_id, sha256");
    const results = (await c.query(statements.join(";\n"))) as unknown as pg.QueryResult[];
    const seen = new Map<string, RecordEntry>();
    reads.forEach(({ family, f }, i) => {
      for (const row of results[i + 2]!.rows as Record<string, unknown>[]) {
        const key = rowKey(f, family, row);
        seen.set(enc(key), { key, value: decodeValue(row.value as Buffer) });
      }
    });
    const payloadList: PayloadRef[] = txReads.payloads
      ? (results[results.length - 1]!.rows as { tenant_id: string; sha256: string }[]).map((r) => ({ tenant: r.tenant_id, id: r.sha256 }))
      : [];

    // the body: synchronous, over what was read and its own staged writes
    const staged = new Map<string, { key: RecordKey; value: unknown } | { key: RecordKey; removed: true }>();
    const payloadOps = new Map<string, { tenant: string; id: string; bytes?: Uint8Array }>();
    const tx: WriteTx = {
      get(key) {
        checkDeclared(txReads, key);
        const s = staged.get(enc(key));
        if (s) return "removed" in s ? undefined : structuredClone(s.value);
        const r = seen.get(enc(key));
        return r === undefined ? undefined : structuredClone(r.value);
      },
      *range(start, end) {
        checkDeclaredRange(txReads, start, end);
        const inside = (k: RecordKey) => compareKeys(start, k) <= 0 && compareKeys(k, end) < 0;
        const merged = new Map<string, RecordEntry | null>();
        for (const [k, r] of seen) if (inside(r.key)) merged.set(k, r);
        for (const [k, s] of staged) if (inside(s.key)) merged.set(k, "removed" in s ? null : { key: s.key, value: s.value });
        const list = [...merged.values()].filter((r): r is RecordEntry => r !== null).sort((a, b) => compareKeys(a.key, b.key));
        for (const r of list) yield { key: r.key, value: structuredClone(r.value) };
      },
      put(key, value) {
        fullFamily(key);
        staged.set(enc(key), { key: [...key], value: structuredClone(value) });
      },
      remove(key) {
        fullFamily(key);
        staged.set(enc(key), { key: [...key], removed: true });
      },
      putPayload(tenant, id, bytes) {
        const k = `${tenant}\u0000${id}`;
        // not copied: the store's payloads are its own and unchanged until the commit (WriteTx)
        if (!payloadOps.get(k)?.bytes) payloadOps.set(k, { tenant, id, bytes });
      },
      removePayload(tenant, id) {
        payloadOps.set(`${tenant}\u0000${id}`, { tenant, id });
      },
      *payloadIds() {
        if (!txReads.payloads) throw new Error("A write transaction listed payloads without declaring it.");
        for (const p of payloadList) {
          const op = payloadOps.get(`${p.tenant}\u0000${p.id}`);
          if (!op || op.bytes) yield p;
        }
      },
    };
    const result = fn(tx);

    // the writes, as data-modifying CTEs of as few statements as possible (one for a put):
    // each round trip on a busy server costs more than the statement
    const w = new WriteBatch(c);
    addPayloadWrites(w, payloadOps.values());
    for (const [k, st] of staged) {
      const f = FAMILIES[st.key[0] as string]!;
      const ids = st.key.slice(1) as unknown[];
      const match = f.cols.map((col, i) => `${col} = $::${f.types[i]}`).join(" AND ");
      if ("removed" in st) w.add(`DELETE FROM ${f.table} WHERE ${match}`, ids);
      // read (and locked) by this transaction: it is ours to change
      else if (seen.has(k)) w.add(`UPDATE ${f.table} SET value = $::bytea WHERE ${match}`, [encodeValue(st.value), ...ids]);
      // absent when read (or never read): a concurrent insert of the same key is a conflict
      else
        w.add(`INSERT INTO ${f.table} (${f.cols.join(", ")}, value) VALUES (${f.types.map((t) => `$::${t}`).join(", ")}, $::bytea)`, [
          ...ids,
          encodeValue(st.value),
        ]);
    }
    await w.commit();
    return result;
  }

  /**
   * compact (lib/store/maintenance.ts) in short steps, a page of rows at a time, so that a write
   * waits at most for one page's removals, never for the whole run (a store of a million keys
   * takes tens of seconds, and a write waiting past the statement timeout is refused):
   * 1. the heads, read a page at a time by key; those with expired tombstones are locked, decided
   *    again on what was locked, and removed or rewritten with their versions in one transaction;
   * 2. the idempotency records, each removed only as it was read (a rewritten one is kept);
   * 3. in one read-only snapshot taken after those, the payloads the versions name, then those
   *    they do not, removed a page at a time, each only while its row is the one the snapshot
   *    saw: a put that names a payload the tenant holds rewrites its row, so a payload named
   *    again since the snapshot is kept.
   * What it holds at once is a page of rows and the set of payloads the kept versions name.
   * `hooks.beforePayloads` runs once the snapshot of step 3 is taken (tests).
   */
  async compact(rules: CompactRules, hooks: CompactHooks = {}): Promise<CompactResult> {
    await this.#whenReady();
    const { versions_purged, keys_purged } = await this.#compactHeads(rules);
    await this.#compactIdempotency(rules);
    const payloads_purged = await this.#compactPayloads(rules, hooks.beforePayloads);
    return { versions_purged, keys_purged, payloads_purged };
  }

  /** Rows of `table` after `after` (its key columns) in key order, a page at most, without locks. */
  async #pageAfter(table: "heads" | "idempotency", cols: string[], after: unknown[] | null): Promise<unknown[][]> {
    const values = after ?? [];
    const where = after ? `WHERE (${cols.join(", ")}) > (${cols.map((_, i) => `$${i + 1}::text`).join(", ")})` : "";
    const r = await this.#pool
      .query<unknown[]>({
        text: `SELECT ${cols.join(", ")}, value FROM ${table} ${where} ORDER BY ${cols.join(", ")} LIMIT ${this.#rangePageRows}`,
        values,
        rowMode: "array",
      })
      .catch(rethrow);
    return r.rows;
  }

  async #compactHeads(rules: CompactRules): Promise<{ versions_purged: number; keys_purged: number }> {
    const cols = ["tenant_id", "namespace", "key"];
    let versions = 0;
    let keys = 0;
    for (let after: unknown[] | null = null; ;) {
      const rows = await this.#pageAfter("heads", cols, after);
      if (rows.length === 0) break;
      after = rows[rows.length - 1]!.slice(0, 3);
      const spans: unknown[][] = [[], [], [], [], []];
      const removed: unknown[][] = [[], [], [], []];
      const kept: unknown[][] = [[], [], [], [], []];
      for (const [t, ns, k, value] of rows) {
        const p = rules.purge(decodeValue(value as Buffer));
        if (p === null) continue;
        for (const [from, upto] of p.spans) [t, ns, k, from, upto].forEach((x, i) => spans[i]!.push(x));
        if (p.head === undefined) [t, ns, k, value].forEach((x, i) => removed[i]!.push(x));
        else [t, ns, k, value, encodeValue(p.head)].forEach((x, i) => kept[i]!.push(x));
      }
      if (spans[0]!.length === 0) continue;
      // one statement: each head removed or rewritten only while it holds the value read (a write
      // since has changed it: it stays for the next run), and the versions of those changed
      const r = await this.#pool
        .query<{ h: number; v: number }>(
          `WITH h AS (DELETE FROM heads h USING unnest($1::text[], $2::text[], $3::text[], $4::bytea[]) AS s(t, n, k, old)
              WHERE h.tenant_id = s.t AND h.namespace = s.n AND h.key = s.k AND h.value = s.old RETURNING h.tenant_id, h.namespace, h.key),
            u AS (UPDATE heads h SET value = s.v FROM unnest($5::text[], $6::text[], $7::text[], $8::bytea[], $9::bytea[]) AS s(t, n, k, old, v)
              WHERE h.tenant_id = s.t AND h.namespace = s.n AND h.key = s.k AND h.value = s.old RETURNING h.tenant_id, h.namespace, h.key),
            m AS (SELECT * FROM h UNION ALL SELECT * FROM u),
            v AS (DELETE FROM versions v USING unnest($10::text[], $11::text[], $12::text[], $13::bigint[], $14::bigint[]) AS s(t, n, k, lo, hi), m
              WHERE m.tenant_id = s.t AND m.namespace = s.n AND m.key = s.k
                AND v.tenant_id = s.t AND v.namespace = s.n AND v.key = s.k AND v.version BETWEEN s.lo AND s.hi RETURNING 1)
           SELECT (SELECT count(*) FROM h)::int AS h, (SELECT count(*) FROM v)::int AS v`,
          [...removed, ...kept, ...spans],
        )
        .catch(rethrow);
      keys += r.rows[0]!.h;
      versions += r.rows[0]!.v;
    }
    return { versions_purged: versions, keys_purged: keys };
  }

  async #compactIdempotency(rules: CompactRules): Promise<void> {
    const cols = ["tenant_id", "key"];
    for (let after: unknown[] | null = null; ;) {
      const rows = await this.#pageAfter("idempotency", cols, after);
      if (rows.length === 0) break;
      after = rows[rows.length - 1]!.slice(0, 2);
      const expired = rows.filter((r) => rules.expired(decodeValue(r[2] as Buffer)));
      if (expired.length === 0) continue;
      // removed only as read: a record written again since (a new request with its key) stays
      await this.#pool
        .query(
          `DELETE FROM idempotency i USING unnest($1::text[], $2::text[], $3::bytea[]) AS s(t, k, v)
            WHERE i.tenant_id = s.t AND i.key = s.k AND i.value = s.v`,
          [0, 1, 2].map((i) => expired.map((r) => r[i])),
        )
        .catch(rethrow);
    }
  }

  async #compactPayloads(rules: CompactRules, beforePayloads?: () => Promise<void>): Promise<number> {
    const page = this.#rangePageRows;
    const client = await this.#pool.connect().catch(rethrow);
    let broken = false;
    let open = false;
    try {
      const c = client;
      const pages = async function* (name: string, query: string): AsyncIterable<unknown[][]> {
        await c.query(`DECLARE ${name} NO SCROLL CURSOR FOR ${query}`);
        yield* fetchPages(c, name, page);
        await c.query(`CLOSE ${name}`);
      };
      await c.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
      open = true;
      const referenced = new Set<string>();
      for await (const rows of pages("svc_versions", "SELECT tenant_id, value FROM versions"))
        for (const [t, value] of rows) referenced.add(`${t as string}\u0000${rules.payloadOf(decodeValue(value as Buffer))}`);
      await beforePayloads?.();
      let purged = 0;
      // each payload with the row version (xmin) the snapshot saw; removed, with its chunks, only
      // while that is still its row: a put naming it since has rewritten it (ON CONFLICT DO UPDATE)
      for await (const rows of pages("svc_payloads", "SELECT tenant_id, sha256, xmin::text FROM payloads")) {
        const unused = rows.filter(([t, id]) => !referenced.has(`${t as string}\u0000${id as string}`));
        if (unused.length === 0) continue;
        const r = await this.#pool
          .query<{ n: number }>(
            `WITH d AS (DELETE FROM payloads p USING unnest($1::text[], $2::text[], $3::xid[]) AS s(t, id, x)
                WHERE p.tenant_id = s.t AND p.sha256 = s.id AND p.xmin = s.x RETURNING p.tenant_id, p.sha256),
              c AS (DELETE FROM payload_chunks pc USING d WHERE pc.tenant_id = d.tenant_id AND pc.sha256 = d.sha256)
             SELECT count(*)::int AS n FROM d`,
            [0, 1, 2].map((i) => unused.map((u) => u[i])),
          )
          .catch(rethrow);
        purged += r.rows[0]!.n;
      }
      await c.query("COMMIT");
      open = false;
      return purged;
    } catch (e) {
      // a connection that failed or timed out mid-transaction is not given to the next caller
      const failure = pgFailure(e);
      if (failure) broken = true;
      throw failure ?? e;
    } finally {
      if (open && !broken) await client.query("ROLLBACK").catch(() => void (broken = true));
      client.release(broken);
    }
  }

  /** Row counts of each table (tests, bench). */
  async stats(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const t of ["heads", "versions", "idempotency", "payloads", "payload_chunks"])
      out[t] = Number((await this.#q<{ n: string }>(`SELECT count(*) AS n FROM ${t}`))[0]!.n);
    return out;
  }

  async close(): Promise<void> {
    await this.#pool.end();
  }
}
