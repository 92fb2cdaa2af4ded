// A PostgreSQL database of its own for one test process: created on first use under a random
// name on the server of SVC_TEST_PG_URL (default postgres://postgres@127.0.0.1:5432/postgres),
// one schema per store opened in it, dropped when the tests end, whether they passed or not.
import test from "tape";
import { randomBytes } from "node:crypto";
import pg from "pg";

export const SERVER_URL = process.env.SVC_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

function withDatabase(url: string, db: string, schema?: string): string {
  const u = new URL(url);
  u.pathname = `/${db}`;
  if (schema) u.searchParams.set("options", `-c search_path=${schema}`);
  return u.toString();
}

let created: Promise<string> | null = null;
let schemas = 0;

async function admin<T>(f: (c: pg.Client) => Promise<T>, url = SERVER_URL): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  c.on("error", () => undefined); // a connection ended by the server is this call's error, not a crash
  await c.connect();
  try {
    return await f(c);
  } finally {
    await c.end();
  }
}

/** The name of this process's database, created on first call (and dropped at the end of the tests). */
export function testDatabase(): Promise<string> {
  return (created ??= (async () => {
    const name = `svc_test_${randomBytes(6).toString("hex")}`;
    await admin((c) => c.query(`CREATE DATABASE ${name}`));
    test.onFinish(() => void dropDatabase(name));
    return name;
  })());
}

export async function dropDatabase(name: string): Promise<void> {
  await admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
}

/** A URL whose connections work in a new, empty schema of this process's database. */
export async function freshStoreUrl(): Promise<string> {
  const db = await testDatabase();
  const schema = `s${++schemas}_${randomBytes(3).toString("hex")}`;
  await admin((c) => c.query(`CREATE SCHEMA ${schema}`), withDatabase(SERVER_URL, db));
  return withDatabase(SERVER_URL, db, schema);
}

/** Runs SQL in the schema that `url` (from freshStoreUrl) works in. */
export async function sql<R extends pg.QueryResultRow = pg.QueryResultRow>(url: string, text: string, values: unknown[] = []): Promise<R[]> {
  return admin(async (c) => (await c.query<R>(text, values)).rows, url);
}
