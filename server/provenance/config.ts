// The appliance's configuration: environment variables, then the values of the
// configuration file (SVC_PROVENANCE_CONFIG, written at first boot) for what the
// environment leaves unset. Parsed once with zod and frozen; a bad value stops the
// process with a sentence naming the variable.
import { NotUtf8Error, readUtf8FileSync } from "./text-file.js";
import { z } from "zod";
import { BACKEND_NAMES, type BackendName } from "./signer.js";
import { DEFAULT_BODY_RATE } from "../http/body-guard.js";

export const DEFAULT_HOME = "/var/lib/svc-provenance";
export const DEFAULT_CONFIG = "/etc/svc-provenance/service.env";
export const ADMIN_HASH_VAR = "SVC_PROVENANCE_ADMIN_KEY_SHA256";

export interface ProvenanceConfig {
  readonly home: string;
  readonly configPath: string;
  readonly backend: BackendName;
  readonly host: string;
  readonly port: number;
  /** Bearer token that may read /metrics besides the admin key; null when unset. */
  readonly metricsToken: string | null;
  /** Largest issuance body, bytes. */
  readonly maxBodyBytes: number;
  /** Largest /verify and /evidence-bundle body, bytes. */
  readonly maxReceiptBodyBytes: number;
  /** Request bodies held in memory at once, bytes. */
  readonly bodyBudgetBytes: number;
  /** Average bytes per second a request body must keep up once its grace time has passed. */
  readonly bodyMinBytesPerS: number;
  /** Seconds a body may take before the minimum rate applies, and the longest pause it may make. */
  readonly bodyGraceS: number;
}

export const DEFAULT_LIMITS = {
  maxBodyBytes: 32 * 1024 * 1024,
  maxReceiptBodyBytes: 4 * 1024 * 1024,
  bodyBudgetBytes: 64 * 1024 * 1024,
  bodyMinBytesPerS: DEFAULT_BODY_RATE.minBytesPerS,
  bodyGraceS: DEFAULT_BODY_RATE.graceMs / 1000,
} as const;

const wholeVar = (name: string, min: number, max: number, unit: string) =>
  z
    .string()
    .regex(/^\d{1,10}$/, `${name} must be a whole number of ${unit}`)
    .transform(Number)
    .refine((n) => n >= min && n <= max, `${name} must be between ${min} and ${max} ${unit}`);

const bytesVar = (name: string) =>
  z
    .string()
    .regex(/^\d{1,10}$/, `${name} must be a whole number of bytes`)
    .transform(Number)
    .refine((n) => n >= 64 * 1024 && n <= 1024 * 1024 * 1024, `${name} must be between 65536 (64 KiB) and 1073741824 (1 GiB)`);

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

const nonEmpty = (v: string) => z.string().min(1, `${v} must not be empty`);
const schemas = {
  SVC_PROVENANCE_HOME: nonEmpty("SVC_PROVENANCE_HOME").refine((s) => s.startsWith("/"), "SVC_PROVENANCE_HOME must be an absolute path"),
  SVC_PROVENANCE_CONFIG: nonEmpty("SVC_PROVENANCE_CONFIG").refine((s) => s.startsWith("/"), "SVC_PROVENANCE_CONFIG must be an absolute path"),
  SVC_PROVENANCE_BACKEND: z.enum(BACKEND_NAMES as [BackendName, ...BackendName[]], { message: "SVC_PROVENANCE_BACKEND must be liboqs or noble" }),
  SVC_PROVENANCE_HOST: nonEmpty("SVC_PROVENANCE_HOST").regex(/^[A-Za-z0-9.:\-[\]]+$/, "SVC_PROVENANCE_HOST must be a host name or IP address"),
  SVC_PROVENANCE_PORT: z
    .string()
    .regex(/^\d{1,5}$/, "SVC_PROVENANCE_PORT must be a port number from 0 to 65535")
    .transform(Number)
    .refine((n) => n <= 65535, "SVC_PROVENANCE_PORT must be a port number from 0 to 65535"),
  SVC_PROVENANCE_MAX_BODY_BYTES: bytesVar("SVC_PROVENANCE_MAX_BODY_BYTES"),
  SVC_PROVENANCE_MAX_RECEIPT_BODY_BYTES: bytesVar("SVC_PROVENANCE_MAX_RECEIPT_BODY_BYTES"),
  SVC_PROVENANCE_BODY_BUDGET_BYTES: bytesVar("SVC_PROVENANCE_BODY_BUDGET_BYTES"),
  SVC_PROVENANCE_BODY_MIN_RATE: wholeVar("SVC_PROVENANCE_BODY_MIN_RATE", 1, 1024 * 1024 * 1024, "bytes per second"),
  SVC_PROVENANCE_BODY_GRACE_S: wholeVar("SVC_PROVENANCE_BODY_GRACE_S", 1, 3600, "seconds"),
  SVC_PROVENANCE_METRICS_TOKEN: z
    .string()
    .min(16, "SVC_PROVENANCE_METRICS_TOKEN must be at least 16 characters")
    .max(512, "SVC_PROVENANCE_METRICS_TOKEN must be at most 512 characters"),
} as const;

/** Every variable the appliance reads from its environment (deployment files are checked against this list). */
export const PROVENANCE_ENV_VARS: readonly string[] = Object.freeze(Object.keys(schemas));

function pick<K extends keyof typeof schemas>(name: K, raw: string | undefined): z.output<(typeof schemas)[K]> | undefined {
  if (raw === undefined) return undefined;
  const r = schemas[name].safeParse(raw);
  if (!r.success) {
    const msg = r.error.issues[0]?.message ?? `${name} is invalid`;
    throw new ConfigError(msg.includes(name) ? `${msg}.` : `${name} is invalid: ${msg}.`);
  }
  return r.data as z.output<(typeof schemas)[K]>;
}

/** Parses `NAME=value` lines (blank lines and `#` comments allowed). */
export function parseEnvFile(text: string, fileName = "the configuration file"): Record<string, string> {
  const out: Record<string, string> = {};
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([A-Z][A-Z0-9_]*)=(.*)$/.exec(line);
    if (!m) throw new ConfigError(`Line ${i + 1} of ${fileName} is not NAME=value.`);
    out[m[1]!] = m[2]!.replace(/^"(.*)"$/, "$1");
  }
  return out;
}

/** The configuration file's text, null where it does not exist; a ConfigError where it cannot be read or is not UTF-8. */
export function readConfigText(path: string): string | null {
  try {
    return readUtf8FileSync(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
    if (e instanceof NotUtf8Error) throw new ConfigError("The configuration file named by SVC_PROVENANCE_CONFIG is not valid UTF-8.");
    throw new ConfigError("The configuration file named by SVC_PROVENANCE_CONFIG cannot be read.");
  }
}

/** The name parseEnvFile gives the configuration file in its sentences. */
export const CONFIG_FILE_NAME = "the configuration file named by SVC_PROVENANCE_CONFIG";

/** Reads the configuration file; a missing file is empty (first boot writes it). */
export function readConfigFile(path: string): Record<string, string> {
  const text = readConfigText(path);
  return text === null ? {} : parseEnvFile(text, CONFIG_FILE_NAME);
}

/** Parses the configuration once; throws ConfigError naming the bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): ProvenanceConfig {
  const configPath = pick("SVC_PROVENANCE_CONFIG", env.SVC_PROVENANCE_CONFIG) ?? DEFAULT_CONFIG;
  const file = readConfigFile(configPath);
  const val = (name: string): string | undefined => env[name] ?? file[name];
  const home = pick("SVC_PROVENANCE_HOME", env.SVC_PROVENANCE_HOME ?? file.SVC_PROVENANCE_HOME) ?? DEFAULT_HOME;
  const maxBodyBytes = pick("SVC_PROVENANCE_MAX_BODY_BYTES", val("SVC_PROVENANCE_MAX_BODY_BYTES")) ?? DEFAULT_LIMITS.maxBodyBytes;
  const maxReceiptBodyBytes = pick("SVC_PROVENANCE_MAX_RECEIPT_BODY_BYTES", val("SVC_PROVENANCE_MAX_RECEIPT_BODY_BYTES")) ?? DEFAULT_LIMITS.maxReceiptBodyBytes;
  const bodyBudgetBytes = pick("SVC_PROVENANCE_BODY_BUDGET_BYTES", val("SVC_PROVENANCE_BODY_BUDGET_BYTES")) ?? DEFAULT_LIMITS.bodyBudgetBytes;
  // a budget below a body limit would refuse the largest allowed request forever
  if (bodyBudgetBytes < Math.max(maxBodyBytes, maxReceiptBodyBytes)) {
    throw new ConfigError("SVC_PROVENANCE_BODY_BUDGET_BYTES must be at least SVC_PROVENANCE_MAX_BODY_BYTES and SVC_PROVENANCE_MAX_RECEIPT_BODY_BYTES.");
  }
  return Object.freeze({
    home,
    configPath,
    backend: pick("SVC_PROVENANCE_BACKEND", val("SVC_PROVENANCE_BACKEND")) ?? "liboqs",
    host: pick("SVC_PROVENANCE_HOST", val("SVC_PROVENANCE_HOST")) ?? "127.0.0.1",
    port: pick("SVC_PROVENANCE_PORT", val("SVC_PROVENANCE_PORT")) ?? 8001,
    metricsToken: pick("SVC_PROVENANCE_METRICS_TOKEN", val("SVC_PROVENANCE_METRICS_TOKEN")) ?? null,
    maxBodyBytes,
    maxReceiptBodyBytes,
    bodyBudgetBytes,
    bodyMinBytesPerS: pick("SVC_PROVENANCE_BODY_MIN_RATE", val("SVC_PROVENANCE_BODY_MIN_RATE")) ?? DEFAULT_LIMITS.bodyMinBytesPerS,
    bodyGraceS: pick("SVC_PROVENANCE_BODY_GRACE_S", val("SVC_PROVENANCE_BODY_GRACE_S")) ?? DEFAULT_LIMITS.bodyGraceS,
  });
}
