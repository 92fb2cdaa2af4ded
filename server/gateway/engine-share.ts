// Engine connections shared fairly between tenants. Wraps any EngineClient (one pool, or a
// balanced pool over several engines): at most `connections` requests are at the engine at
// once, one tenant holds at most `tenantSharePct` percent of them, and a request that cannot
// get a connection within `queueTimeoutMs` is answered 503 with Retry-After instead of queueing
// without a deadline. A connection is held from the forward until the engine's response body
// has been relayed (or dropped), which is how long the underlying pool keeps it.
import { OverloadedError } from "../../lib/errors.js";
import type { EngineClient, EngineResponse, ForwardRequest } from "./proxy.js";

export interface ShareOptions {
  readonly connections: number;
  readonly tenantSharePct: number;
  readonly queueTimeoutMs: number;
}

interface Waiter {
  tenant: string;
  grant: () => void;
  timer: NodeJS.Timeout;
}

export class SharedEngineClient implements EngineClient {
  private inUse = 0;
  private readonly byTenant = new Map<string, number>();
  private readonly queue: Waiter[] = [];
  /** The most connections one tenant may hold. */
  readonly perTenant: number;

  constructor(
    private readonly inner: EngineClient,
    private readonly opts: ShareOptions,
  ) {
    this.perTenant = Math.max(1, Math.floor((opts.connections * opts.tenantSharePct) / 100));
  }

  /** Connections held now, in all and by `tenant` (tests, health). */
  held(tenant?: string): number {
    return tenant === undefined ? this.inUse : (this.byTenant.get(tenant) ?? 0);
  }

  private fits(tenant: string): boolean {
    return this.inUse < this.opts.connections && (this.byTenant.get(tenant) ?? 0) < this.perTenant;
  }

  private hold(tenant: string): void {
    this.inUse++;
    this.byTenant.set(tenant, (this.byTenant.get(tenant) ?? 0) + 1);
  }

  private release(tenant: string): void {
    this.inUse--;
    const n = (this.byTenant.get(tenant) ?? 1) - 1;
    if (n <= 0) this.byTenant.delete(tenant);
    else this.byTenant.set(tenant, n);
    // The oldest waiter that fits now; a tenant at its share does not block the others.
    for (let i = 0; i < this.queue.length && this.inUse < this.opts.connections; i++) {
      const w = this.queue[i]!;
      if (!this.fits(w.tenant)) continue;
      this.queue.splice(i, 1);
      clearTimeout(w.timer);
      this.hold(w.tenant);
      w.grant();
      i--;
    }
  }

  private acquire(tenant: string): Promise<void> {
    if (this.fits(tenant)) {
      this.hold(tenant);
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        tenant,
        grant: resolve,
        timer: setTimeout(() => {
          const i = this.queue.indexOf(w);
          if (i >= 0) this.queue.splice(i, 1);
          const mine = (this.byTenant.get(tenant) ?? 0) >= this.perTenant;
          reject(
            new OverloadedError(
              mine
                ? `Tenant ${tenant} holds its share of ${this.perTenant} engine connections; retry after 1 second.`
                : `No engine connection became free within ${this.opts.queueTimeoutMs} ms; retry after 1 second.`,
              1,
            ),
          );
        }, this.opts.queueTimeoutMs),
      };
      this.queue.push(w);
    });
  }

  async forward(r: ForwardRequest): Promise<EngineResponse> {
    await this.acquire(r.tenantId);
    let res: EngineResponse;
    try {
      res = await this.inner.forward(r);
    } catch (e) {
      this.release(r.tenantId);
      throw e;
    }
    let released = false;
    const done = () => {
      if (released) return;
      released = true;
      this.release(r.tenantId);
    };
    // a body read whole has freed its connection already
    if (res.body === null) {
      done();
      return res;
    }
    res.body.once("close", done);
    res.body.once("end", done);
    res.body.once("error", done);
    if (res.body.destroyed) done();
    return res;
  }

  ping(): Promise<boolean> {
    return this.inner.ping();
  }

  get probe(): EngineClient["probe"] {
    return this.inner.probe ? () => this.inner.probe!() : undefined;
  }

  /** Several engines behind the inner client: their states, as it reports them. */
  get engines(): EngineClient["engines"] {
    return this.inner.engines ? () => this.inner.engines!() : undefined;
  }

  async close(): Promise<void> {
    for (const w of this.queue.splice(0)) clearTimeout(w.timer);
    await this.inner.close();
  }
}
