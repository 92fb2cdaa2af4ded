// ML-DSA-65 behind one interface with two backends: liboqs (the Open Quantum Safe
// WASM build, default) and noble (pure JavaScript). Both sign FIPS 204 pure mode with
// an empty context, so each verifies the other's signatures.
import nodeCrypto, { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const ALGORITHM = "ML-DSA-65" as const;
export const PUBLIC_KEY_BYTES = 1952;
export const SECRET_KEY_BYTES = 4032;
export const SIGNATURE_BYTES = 3309;

export type BackendName = "liboqs" | "noble";
export const BACKEND_NAMES: readonly BackendName[] = ["liboqs", "noble"];

export interface KeyPair {
  publicKey: Uint8Array;
  secretKey: Uint8Array;
}

/** The raw ML-DSA-65 operations of one library. */
export interface MlDsaBackend {
  readonly name: BackendName;
  /** Version of the library package. */
  readonly version: string;
  generateKeyPair(): KeyPair;
  sign(message: Uint8Array, secretKey: Uint8Array): Uint8Array;
  /**
   * FIPS 204 deterministic signing (rnd = 32 zero bytes): the same message and key give
   * the same bytes, which keeps evidence bundles reproducible.
   */
  signDeterministic(message: Uint8Array, secretKey: Uint8Array): Uint8Array;
  /** False for any malformed input: never throws for a bad signature or key. */
  verify(message: Uint8Array, signature: Uint8Array, publicKey: Uint8Array): boolean;
}

/** A key that signs: the secret key stays inside. */
export interface Signer {
  readonly backend: MlDsaBackend;
  readonly publicKey: Uint8Array;
  /** SHA-256 of the raw public key, lower-case hex. */
  readonly fingerprint: string;
  sign(message: Uint8Array): Uint8Array;
  signDeterministic(message: Uint8Array): Uint8Array;
}

function packageVersion(name: string): string {
  try {
    // package.json is not in the exports of every package: find it beside the entry point
    const main = fileURLToPath(import.meta.resolve(name));
    const marker = `node_modules/${name}/`;
    const pkgPath = main.slice(0, main.lastIndexOf(marker) + marker.length) + "package.json";
    return (JSON.parse(readFileSync(pkgPath, "utf8")) as { version: string }).version;
  } catch {
    return "unknown";
  }
}

export function fingerprintOf(publicKey: Uint8Array): string {
  return createHash("sha256").update(publicKey).digest("hex");
}

// liboqs-js has no deterministic-signing entry point; its WASM build draws the signing
// randomness rnd through node:crypto.randomFillSync, looked up at each call. For the one
// synchronous call we hand it zeros, which is FIPS 204's deterministic variant; the
// result is checked against the expected length and, at start-up, for determinism.
function withZeroRandomness<T>(fn: () => T): T {
  const original = nodeCrypto.randomFillSync;
  let calls = 0;
  (nodeCrypto as { randomFillSync: unknown }).randomFillSync = <B extends NodeJS.ArrayBufferView>(buf: B): B => {
    calls++;
    new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength).fill(0);
    return buf;
  };
  try {
    const r = fn();
    if (calls !== 1) throw new Error("liboqs did not draw the signing randomness as expected");
    return r;
  } finally {
    (nodeCrypto as { randomFillSync: unknown }).randomFillSync = original;
  }
}

async function createLiboqs(): Promise<MlDsaBackend> {
  const { createMLDSA65 } = await import("@oqs/liboqs-js");
  const sig = await createMLDSA65();
  const version = packageVersion("@oqs/liboqs-js");
  return {
    name: "liboqs",
    version,
    generateKeyPair: () => sig.generateKeyPair(),
    sign: (message, secretKey) => sig.sign(plain(message), plain(secretKey)),
    signDeterministic: (message, secretKey) => withZeroRandomness(() => sig.sign(plain(message), plain(secretKey))),
    verify(message, signature, publicKey) {
      if (publicKey.length !== PUBLIC_KEY_BYTES || signature.length !== SIGNATURE_BYTES) return false;
      try {
        return sig.verify(plain(message), plain(signature), plain(publicKey)) === true;
      } catch {
        return false;
      }
    },
  };
}

async function createNoble(): Promise<MlDsaBackend> {
  const { ml_dsa65 } = await import("@noble/post-quantum/ml-dsa.js");
  const version = packageVersion("@noble/post-quantum");
  return {
    name: "noble",
    version,
    generateKeyPair: () => ml_dsa65.keygen(),
    sign: (message, secretKey) => ml_dsa65.sign(message, secretKey),
    signDeterministic: (message, secretKey) => ml_dsa65.sign(message, secretKey, { extraEntropy: false }),
    verify(message, signature, publicKey) {
      if (publicKey.length !== PUBLIC_KEY_BYTES || signature.length !== SIGNATURE_BYTES) return false;
      try {
        return ml_dsa65.verify(signature, message, publicKey) === true;
      } catch {
        return false;
      }
    },
  };
}

// liboqs-js checks `constructor.name === "Uint8Array"`, which a Buffer fails.
function plain(u: Uint8Array): Uint8Array {
  return u.constructor === Uint8Array ? u : new Uint8Array(u.buffer, u.byteOffset, u.byteLength);
}

/** Loads a backend by name. */
export async function createBackend(name: BackendName): Promise<MlDsaBackend> {
  if (name === "liboqs") return createLiboqs();
  if (name === "noble") return createNoble();
  throw new Error(`unknown signing backend ${String(name)}`);
}

/** Signs with `keyPair` through `backend`. */
export function createSigner(backend: MlDsaBackend, keyPair: KeyPair): Signer {
  if (keyPair.publicKey.length !== PUBLIC_KEY_BYTES || keyPair.secretKey.length !== SECRET_KEY_BYTES) {
    throw new Error("the keypair does not have ML-DSA-65 sizes");
  }
  const secretKey = new Uint8Array(keyPair.secretKey);
  const publicKey = new Uint8Array(keyPair.publicKey);
  const fingerprint = fingerprintOf(publicKey);
  return {
    backend,
    publicKey,
    fingerprint,
    sign: (message) => backend.sign(message, secretKey),
    signDeterministic: (message) => backend.signDeterministic(message, secretKey),
  };
}

/**
 * Signs and verifies a fixed message with a fresh key: the status `/health` reports.
 * Returns "ok" or "failing".
 */
export function selfTest(backend: MlDsaBackend): "ok" | "failing" {
  try {
    const kp = backend.generateKeyPair();
    const msg = new TextEncoder().encode("svc-provenance self-test");
    const sig = backend.sign(msg, kp.secretKey);
    const d1 = backend.signDeterministic(msg, kp.secretKey);
    const d2 = backend.signDeterministic(msg, kp.secretKey);
    const good = backend.verify(msg, sig, kp.publicKey) && backend.verify(msg, d1, kp.publicKey) && Buffer.from(d1).equals(Buffer.from(d2));
    const bad = new Uint8Array(sig);
    bad[0]! ^= 1;
    return good && !backend.verify(msg, bad, kp.publicKey) ? "ok" : "failing";
  } catch {
    return "failing";
  }
}
