// First boot, key loading and rotation. State under SVC_PROVENANCE_HOME:
//   keys/                     0700
//   keys/signing-key.json     0600  the active keypair (the only file with a secret key)
//   keys/retired/<fp>.json    0600  earlier public keys, kept so old receipts verify
//   chain.log                 0600  the receipt chain heads, one JSON line per committed batch
// The configuration file holds only the SHA-256 of the admin key.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { chmod, mkdir, readdir, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { z } from "zod";
import { ADMIN_HASH_VAR, CONFIG_FILE_NAME, ConfigError, parseEnvFile, readConfigText, type ProvenanceConfig } from "./config.js";
import { NotUtf8Error, readUtf8File } from "./text-file.js";
import { writeFileAtomic } from "../../lib/atomic-file.js";
import { ALGORITHM, PUBLIC_KEY_BYTES, SECRET_KEY_BYTES, fingerprintOf, type KeyPair, type MlDsaBackend } from "./signer.js";
import { parseIJson } from "../http/json.js";
import { writeGenesis } from "./chain.js";

export interface ActiveKey extends KeyPair {
  fingerprint: string;
  created_at: string;
}

export interface RetiredKey {
  publicKey: Uint8Array;
  fingerprint: string;
  created_at: string;
  retired_at: string;
}

export interface Keyring {
  active: ActiveKey;
  retired: RetiredKey[];
}

export const paths = (home: string) => ({
  keys: join(home, "keys"),
  active: join(home, "keys", "signing-key.json"),
  retired: join(home, "keys", "retired"),
  chain: join(home, "chain.log"),
});

const b64 = (n: number) => z.string().refine((s) => /^[A-Za-z0-9+/]*={0,2}$/.test(s) && Buffer.from(s, "base64").length === n, `must be ${n} bytes of base64`);
const HEX64 = z.string().regex(/^[0-9a-f]{64}$/);
const activeFile = z.strictObject({
  algorithm: z.literal(ALGORITHM),
  public_key: b64(PUBLIC_KEY_BYTES),
  secret_key: b64(SECRET_KEY_BYTES),
  fingerprint: HEX64,
  created_at: z.string(),
});
const retiredFile = z.strictObject({
  algorithm: z.literal(ALGORITHM),
  public_key: b64(PUBLIC_KEY_BYTES),
  fingerprint: HEX64,
  created_at: z.string(),
  retired_at: z.string(),
});

/** SHA-256 hex of a secret, the only form in which secrets are stored. */
export function hashSecret(secret: string): string {
  return createHash("sha256").update(secret, "utf8").digest("hex");
}

/** Constant-time comparison of a presented secret with a stored SHA-256 hex digest. */
export function secretMatches(presented: string, storedSha256Hex: string): boolean {
  const a = createHash("sha256").update(presented, "utf8").digest();
  const b = Buffer.from(storedSha256Hex, "hex");
  return b.length === a.length && timingSafeEqual(a, b);
}

/** A new admin API key: `svcp_` and 43 base64url characters (256 random bits). */
export function generateAdminKey(): string {
  return "svcp_" + randomBytes(32).toString("base64url");
}

const modeText = (m: number): string => `0${(m & 0o777).toString(8)}`;

/**
 * Creates `dir` (and missing parents) 0700 whatever the umask, and sets an existing `dir` to
 * 0700; returns a warning when it was open to group or others before.
 */
async function ensureDir(dir: string): Promise<string | null> {
  let before: number | null = null;
  try {
    before = (await stat(dir)).mode;
  } catch {
    /* created below */
  }
  await makeDirs(dir);
  await chmod(dir, 0o700);
  return before !== null && (before & 0o077) !== 0 ? `The directory ${dir} was open to group or others (mode ${modeText(before)}); it is now 0700.` : null;
}

/** mkdir -p with every directory it creates set to exactly 0700 (the umask can only narrow mkdir's mode). */
async function makeDirs(dir: string): Promise<void> {
  const first = await mkdir(dir, { recursive: true, mode: 0o700 });
  if (first === undefined) return;
  for (let d = dir; ; d = dirname(d)) {
    await chmod(d, 0o700);
    if (d === first || dirname(d) === d) break;
  }
}

function activeToFile(k: ActiveKey): string {
  return (
    JSON.stringify({
      algorithm: ALGORITHM,
      public_key: Buffer.from(k.publicKey).toString("base64"),
      secret_key: Buffer.from(k.secretKey).toString("base64"),
      fingerprint: k.fingerprint,
      created_at: k.created_at,
    }) + "\n"
  );
}

async function readJson(path: string, what: string): Promise<unknown> {
  try {
    return parseIJson(await readUtf8File(path));
  } catch (e) {
    if (e instanceof NotUtf8Error) throw new ConfigError(`The ${what} is not valid UTF-8.`);
    throw new ConfigError(`The ${what} cannot be read or is not valid JSON.`);
  }
}

async function loadActive(home: string): Promise<ActiveKey | null> {
  const p = paths(home).active;
  let st;
  try {
    st = await stat(p);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw new ConfigError("The signing key file cannot be read.");
  }
  // refused, not only warned about: the secret key may already have been copied
  if ((st.mode & 0o077) !== 0) throw new ConfigError(`The signing key file is open to group or others (mode ${modeText(st.mode)}); its mode must be 0600.`);
  const r = activeFile.safeParse(await readJson(p, "signing key file"));
  if (!r.success) throw new ConfigError("The signing key file is malformed.");
  const publicKey = new Uint8Array(Buffer.from(r.data.public_key, "base64"));
  if (fingerprintOf(publicKey) !== r.data.fingerprint) throw new ConfigError("The signing key file's fingerprint does not match its public key.");
  return {
    publicKey,
    secretKey: new Uint8Array(Buffer.from(r.data.secret_key, "base64")),
    fingerprint: r.data.fingerprint,
    created_at: r.data.created_at,
  };
}

async function loadRetired(home: string, activeFp: string): Promise<RetiredKey[]> {
  const dir = paths(home).retired;
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw new ConfigError("The retired keys directory cannot be read.");
  }
  const out: RetiredKey[] = [];
  for (const name of names.filter((n) => n.endsWith(".json")).sort()) {
    const r = retiredFile.safeParse(await readJson(join(dir, name), "retired key file"));
    if (!r.success) throw new ConfigError(`The retired key file ${name} is malformed.`);
    const publicKey = new Uint8Array(Buffer.from(r.data.public_key, "base64"));
    if (fingerprintOf(publicKey) !== r.data.fingerprint || name !== `${r.data.fingerprint}.json`) {
      throw new ConfigError(`The retired key file ${name} does not match its public key.`);
    }
    // a rotation interrupted after retiring may leave the active key here too
    if (r.data.fingerprint === activeFp) continue;
    out.push({ publicKey, fingerprint: r.data.fingerprint, created_at: r.data.created_at, retired_at: r.data.retired_at });
  }
  return out.sort((a, b) => a.retired_at.localeCompare(b.retired_at) || a.fingerprint.localeCompare(b.fingerprint));
}

async function writeActive(home: string, kp: KeyPair, now: Date): Promise<ActiveKey> {
  const k: ActiveKey = { ...kp, fingerprint: fingerprintOf(kp.publicKey), created_at: now.toISOString() };
  await ensureDir(paths(home).keys);
  await writeFileAtomic(paths(home).active, activeToFile(k), 0o600, { createDir: true });
  return k;
}

/** The admin key hash from the configuration file, or null. */
function readAdminHash(configPath: string): { hash: string | null; text: string | null } {
  const text = readConfigText(configPath);
  if (text === null) return { hash: null, text: null };
  const vars = parseEnvFile(text, CONFIG_FILE_NAME);
  const h = vars[ADMIN_HASH_VAR];
  if (h === undefined) return { hash: null, text };
  if (!/^[0-9a-f]{64}$/.test(h)) throw new ConfigError(`${ADMIN_HASH_VAR} in the configuration file must be 64 lower-case hex characters.`);
  return { hash: h, text };
}

export interface BootResult {
  keyring: Keyring;
  adminKeySha256: string;
  /** The new admin key on the boot that created it (to print once), else null. */
  adminKey: string | null;
  createdKeypair: boolean;
  /** One sentence per file or directory that was open to group or others (no key material). */
  warnings: string[];
}

/**
 * First boot or a later start: creates what is missing (keypair, admin key) and reuses
 * what is there. Only the admin key's hash is written; the key itself is returned once.
 */
export async function bootstrap(config: ProvenanceConfig, backend: MlDsaBackend, now = new Date()): Promise<BootResult> {
  const warnings: string[] = [];
  // retired/ too: whoever can write there adds a public key that /verify trusts
  for (const dir of [config.home, paths(config.home).keys, paths(config.home).retired]) {
    const w = await ensureDir(dir);
    if (w) warnings.push(w);
  }
  let active = await loadActive(config.home);
  let createdKeypair = false;
  if (!active) {
    // the chain log's genesis first: a key never exists without it, unless the log was lost
    await writeGenesis(paths(config.home).chain);
    active = await writeActive(config.home, backend.generateKeyPair(), now);
    createdKeypair = true;
  }
  const { hash, text } = readAdminHash(config.configPath);
  let adminKey: string | null = null;
  let adminKeySha256 = hash;
  if (!adminKeySha256) {
    adminKey = generateAdminKey();
    adminKeySha256 = hashSecret(adminKey);
    const header =
      text === null
        ? "# svc-provenance runtime configuration, written at first boot.\n# Only the SHA-256 of the admin API key is stored here.\n"
        : text.endsWith("\n") || text === ""
          ? text
          : text + "\n";
    // a directory made here is 0700; an existing one (/etc/svc-provenance) is the operator's
    await makeDirs(dirname(config.configPath));
    await writeFileAtomic(config.configPath, `${header}${ADMIN_HASH_VAR}=${adminKeySha256}\n`, 0o600, { createDir: true });
  } else {
    // the operator's file: it may hold SVC_PROVENANCE_METRICS_TOKEN, so say when others can read it
    const st = await stat(config.configPath);
    if ((st.mode & 0o077) !== 0) {
      warnings.push(
        `The configuration file ${config.configPath} is open to group or others (mode ${modeText(st.mode)}); it holds the admin key's hash and may hold the metrics token: make it 0600.`,
      );
    }
  }
  const retired = await loadRetired(config.home, active.fingerprint);
  return { keyring: { active, retired }, adminKeySha256, adminKey, createdKeypair, warnings };
}

/** Loads the keyring without creating anything. */
export async function loadKeyring(home: string): Promise<Keyring> {
  const active = await loadActive(home);
  if (!active) throw new ConfigError("There is no signing key yet; run svc-provenance init first.");
  return { active, retired: await loadRetired(home, active.fingerprint) };
}

/**
 * Makes a new active keypair and retires the old one (its public key is kept; its secret
 * key is replaced). The retired copy is written before the active file is replaced, so
 * an interruption never loses a public key.
 */
export async function rotateKey(home: string, backend: MlDsaBackend, now = new Date()): Promise<Keyring> {
  const old = await loadActive(home);
  if (!old) throw new ConfigError("There is no signing key to rotate; run svc-provenance init first.");
  await ensureDir(paths(home).keys);
  await ensureDir(paths(home).retired);
  await writeFileAtomic(
    join(paths(home).retired, `${old.fingerprint}.json`),
    JSON.stringify({
      algorithm: ALGORITHM,
      public_key: Buffer.from(old.publicKey).toString("base64"),
      fingerprint: old.fingerprint,
      created_at: old.created_at,
      retired_at: now.toISOString(),
    }) + "\n",
    0o600,
    { createDir: true },
  );
  // a chain log lost with the old key starts again under the new one
  await writeGenesis(paths(home).chain);
  await writeActive(home, backend.generateKeyPair(), now);
  return loadKeyring(home);
}

/** The public-key response of the appliance. */
export function publicKeyDocument(k: Keyring): {
  algorithm: string;
  public_key: string;
  fingerprint: string;
  retired: Array<{ public_key: string; fingerprint: string; retired_at: string }>;
} {
  return {
    algorithm: ALGORITHM,
    public_key: Buffer.from(k.active.publicKey).toString("base64"),
    fingerprint: k.active.fingerprint,
    retired: k.retired.map((r) => ({
      public_key: Buffer.from(r.publicKey).toString("base64"),
      fingerprint: r.fingerprint,
      retired_at: r.retired_at,
    })),
  };
}
