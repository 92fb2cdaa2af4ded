// A real engine (LMDB in a temp dir) and gateway on ephemeral ports, plus one tenant.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { request } from "undici";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine } from "../../server/engine/server.js";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { startGateway } from "../../server/gateway/server.js";

export interface Stack {
  dir: string;
  gateway: string;
  engine: string;
  serviceKey: string;
  apiKey: string;
  close(): Promise<void>;
}

export async function startStack(namespaces = ["default", "ns"], gateEnv: NodeJS.ProcessEnv = {}): Promise<Stack> {
  const dir = await mkdtemp(join(tmpdir(), "svc-stack-"));
  const serviceKey = "s".repeat(64);
  const engine = await startEngine(
    loadEngineConfig({
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      SVC_ENGINE_API_KEYS: serviceKey,
      SVC_ENGINE_LOG_LEVEL: "silent",
    }),
  );
  const gateway = await startGateway(
    loadGatewayConfig({
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engine.url,
      SVC_GATE_ENGINE_SERVICE_KEY: serviceKey,
      SVC_GATE_DATA_DIR: join(dir, "gate"),
      SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
      SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "100000",
      ...gateEnv,
    }),
  );
  const res = await request(`${gateway.url}/gate/onboard/create`, {
    method: "POST",
    headers: { authorization: `Bearer ${serviceKey}`, "content-type": "application/json" },
    body: JSON.stringify({ tenant_id: "t1", namespaces }),
  });
  const { api_key } = (await res.body.json()) as { api_key: string };
  return {
    dir,
    gateway: gateway.url,
    engine: engine.url,
    serviceKey,
    apiKey: api_key,
    async close() {
      await gateway.close();
      await engine.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
