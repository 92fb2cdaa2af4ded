// SVC_ENGINE_MAX_CONNECTIONS_PER_ADDRESS: one client address holding its cap of open TCP
// connections (idle ones that never send a request) gets its next one closed on arrival,
// counted in svc_engine_connections_refused_total, while other addresses are served and a
// closed connection frees a place; the Unix socket has no cap; 0 turns it off; bad values are
// one sentence naming the variable. Loopback's 127.0.0.2 and 127.0.0.3 stand for other machines.
import test from "tape";
import { mkdtempSync, rmSync } from "node:fs";
import type { Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jsonLogger } from "../../server/engine/app.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine, type RunningEngine } from "../../server/engine/server.js";
import { servedOf as served } from "../lib/raw-connection.js";

const KEY = "k".repeat(40);

async function withEngine(env: Record<string, string>, fn: (e: RunningEngine) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "svc-engine-cap-"));
  const e = await startEngine(
    loadEngineConfig({
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: join(dir, "data"),
      SVC_ENGINE_API_KEYS: KEY,
      SVC_ENGINE_SOCKET: join(dir, "engine.sock"),
      ...env,
    }),
    { logger: jsonLogger("silent") },
  );
  try {
    await fn(e);
  } finally {
    await e.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const refusedCount = async (url: string): Promise<number> => {
  const text = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text();
  return Number(/^svc_engine_connections_refused_total (\d+)$/m.exec(text)?.[1] ?? NaN);
};

test("engine connection cap: an address at its cap has its next connection closed; others and the socket are served", async (t) => {
  await withEngine({ SVC_ENGINE_MAX_CONNECTIONS_PER_ADDRESS: "3" }, async (e) => {
    const held: Socket[] = [];
    try {
      t.equal(await served(e.url, 3, held, "127.0.0.2"), 3, "3 connections of 127.0.0.2 are served (and kept alive)");
      t.equal(await served(e.url, 1, held, "127.0.0.2"), 0, "the fourth from 127.0.0.2 is closed without an answer");
      t.equal(await served(e.url, 1, held, "127.0.0.3"), 1, "127.0.0.3 is served");
      t.equal(await served(e.socketUrl!, 6, held), 6, "6 connections over the Unix socket are served where the cap is 3");
      t.equal((await fetch(`${e.url}/health`)).status, 200, "so is 127.0.0.1");
      t.equal(await refusedCount(e.url), 1, "svc_engine_connections_refused_total counts the one closed");
      // a connection that closes frees its place; the engine sees the close after the client
      // does, so a few tries, each a new connection
      const gone = held.shift()!;
      await new Promise<void>((r) => {
        gone.once("close", () => r());
        gone.destroy();
      });
      let again = 0;
      for (let i = 0; i < 50 && again === 0; i++) {
        again = await served(e.url, 1, held, "127.0.0.2");
        if (again === 0) await new Promise((r) => setTimeout(r, 100));
      }
      t.equal(again, 1, "with one of its connections closed, 127.0.0.2 is served again");
    } finally {
      for (const s of held) s.destroy();
    }
  });
});

test("engine connection cap: 0 turns it off", async (t) => {
  await withEngine({ SVC_ENGINE_MAX_CONNECTIONS_PER_ADDRESS: "0" }, async (e) => {
    const held: Socket[] = [];
    try {
      t.equal(await served(e.url, 20, held, "127.0.0.3"), 20, "cap 0: 20 connections from one address");
      t.equal(await refusedCount(e.url), 0, "none refused");
    } finally {
      for (const s of held) s.destroy();
    }
  });
});

test("SVC_ENGINE_MAX_CONNECTIONS_PER_ADDRESS: default 1024, 0 allowed, bad values named", (t) => {
  const base = { SVC_ENGINE_API_KEYS: KEY };
  t.equal(loadEngineConfig(base).max_connections_per_address, 1024, "default 1024");
  t.equal(loadEngineConfig({ ...base, SVC_ENGINE_MAX_CONNECTIONS_PER_ADDRESS: "0" }).max_connections_per_address, 0, "0: no cap");
  for (const bad of ["-1", "ten", "1.5", "1000001"]) {
    let err: Error | null = null;
    try {
      loadEngineConfig({ ...base, SVC_ENGINE_MAX_CONNECTIONS_PER_ADDRESS: bad });
    } catch (e) {
      err = e as Error;
    }
    t.match(err?.message ?? "", /^SVC_ENGINE_MAX_CONNECTIONS_PER_ADDRESS must be (a whole number|at most 1000000)\.$/, `${bad}: ${err?.message}`);
  }
  t.end();
});
