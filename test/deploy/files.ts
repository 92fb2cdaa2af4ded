// What the deployment-file tests share: the repository root, the variables each server
// reads, and a check that an environment is one its server accepts.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { ENGINE_ENV_VARS, loadEngineConfig } from "../../server/engine/config.js";
import { GATEWAY_ENV_VARS, loadGatewayConfig } from "../../server/gateway/config.js";
import { PROVENANCE_ENV_VARS, loadConfig as loadProvenanceConfig } from "../../server/provenance/config.js";

export const ROOT = new URL("../../", import.meta.url).pathname;
export const exists = (rel: string): boolean => existsSync(join(ROOT, rel));

export type Role = "engine" | "gateway" | "provenance";

/** Variables other than SVC_* that a unit or a service may set for Node itself. */
const PROCESS_VARS = new Set(["NODE_ENV"]);

/** The variables of `env` that `role`'s server does not read (typos, removed names). */
export function unknownVars(role: Role, env: Record<string, string>): string[] {
  const known = new Set<string>([...(role === "engine" ? ENGINE_ENV_VARS : role === "gateway" ? GATEWAY_ENV_VARS : PROVENANCE_ENV_VARS), ...PROCESS_VARS]);
  return Object.keys(env).filter((k) => !known.has(k));
}

/** Loads `role`'s configuration from `env` (throws the server's own one-sentence error on a bad value). */
export function loadFor(role: Role, env: Record<string, string>): unknown {
  if (role === "engine") return loadEngineConfig(env);
  if (role === "gateway") return loadGatewayConfig(env);
  return loadProvenanceConfig(env);
}
