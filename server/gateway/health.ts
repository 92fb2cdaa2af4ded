// GET /health and /gate/health (docs/api.md (health)): no authentication; the two booleans are
// measured on each call (engine: GET /health within 1 s; store: the gateway's PING of Redis or
// a probe write into its data dir, and the engine's own store_connected when it reports one).
// With several engines, `engines` lists each one's state (by position, not address).
import type { RequestHandler } from "express";
import type { EngineClient } from "./proxy.js";
import type { TenantRegistry } from "./tenants.js";

const within = <T>(p: Promise<T>, ms: number, fallback: T): Promise<T> =>
  new Promise((resolve) => {
    const t = setTimeout(() => resolve(fallback), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      () => {
        clearTimeout(t);
        resolve(fallback);
      },
    );
  });

export function healthHandler(engine: EngineClient, registry: TenantRegistry, startedAtMs: number, now: () => number): RequestHandler {
  return async (_req, res) => {
    if (engine.engines) {
      // Several engines: each one's state; engine_reachable when at least one answers.
      const [engines, state] = await Promise.all([within(engine.engines(), 1500, null), within(registry.ping(), 1000, false)]);
      const engine_reachable = engines?.some((e) => e.reachable) ?? false;
      const store_connected = state && (engines?.some((e) => e.reachable && e.store_connected) ?? false);
      res
        .status(200)
        .json({ status: "ok", engine_reachable, store_connected, uptime_s: Math.max(0, Math.floor((now() - startedAtMs) / 1000)), engines: engines ?? [] });
      return;
    }
    const probe = engine.probe ? engine.probe() : engine.ping().then((reachable) => ({ reachable, store_connected: true }));
    const [{ reachable: engine_reachable, store_connected: engineStore }, state] = await Promise.all([
      within(probe, 1500, { reachable: false, store_connected: true }),
      within(registry.ping(), 1000, false),
    ]);
    // an engine that cannot be reached says nothing of its store: engine_reachable tells that
    const store_connected = state && (!engine_reachable || engineStore);
    res.status(200).json({ status: "ok", engine_reachable, store_connected, uptime_s: Math.max(0, Math.floor((now() - startedAtMs) / 1000)) });
  };
}
