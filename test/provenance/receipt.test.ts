// Receipts: canonical body, PAE, the six checks, tampering of every field, cross-backend
// verification and determinism of the verdict.
import test from "tape";
import canonicalize from "canonicalize";
import { createBackend, createSigner, type MlDsaBackend, type Signer } from "../../server/provenance/signer.js";
import {
  CHECK_NAMES,
  RECEIPT_PAYLOAD_TYPE,
  RECEIPT_SCHEMA,
  artifactDigest,
  assembleReceipt,
  buildReceipt,
  canonicalBytes,
  pae,
  prepareReceipt,
  receiptBody,
  receiptHash,
  signedMessage,
  verifyReceipt,
  withSignature,
  type Receipt,
  type VerifyOptions,
} from "../../server/provenance/receipt.js";

const oqs = await createBackend("liboqs");
const noble = await createBackend("noble");
const signerA = createSigner(oqs, oqs.generateKeyPair());
const signerB = createSigner(noble, noble.generateKeyPair()); // "another instance"
const bytes = Buffer.from("model weights v1");
const artifact = { name: "model.safetensors", ...artifactDigest(bytes), media_type: "application/octet-stream" };

function issue(signer: Signer, serial = 1, previous: string | null = null, claims: Record<string, unknown> = { run: { seed: 7 }, note: "ok" }): Receipt {
  return buildReceipt({ artifact, claims }, { serial, previous }, signer, new Date("2026-11-22T03:55:00.123Z"));
}
const opts = (backend: MlDsaBackend, signer: Signer = signerA): VerifyOptions => ({
  backend,
  keys: [{ publicKey: signer.publicKey, fingerprint: signer.fingerprint }],
  trustedFingerprints: [signer.fingerprint],
});
const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;
const failing = (r: ReturnType<typeof verifyReceipt>) => r.checks.filter((c) => !c.ok).map((c) => c.name);

test("PAE is the DSSE v1 encoding", (t) => {
  t.equal(pae("t/x", Buffer.from("hello")).toString(), "DSSEv1 3 t/x 5 hello", "ASCII example");
  t.equal(pae("é", Buffer.from("ü")).toString("hex"), Buffer.from("DSSEv1 2 é 2 ü").toString("hex"), "lengths count UTF-8 bytes");
  t.end();
});

test("a receipt has the schema's fields, signs the PAE of its canonical body, and verifies with all six checks", (t) => {
  const r = issue(signerA);
  t.deepEqual(Object.keys(r).sort(), ["artifact", "claims", "issued_at", "previous_receipt_sha256", "receipt_id", "schema", "serial", "signature", "signer"]);
  t.equal(r.schema, RECEIPT_SCHEMA);
  t.equal(r.signature.payload_type, RECEIPT_PAYLOAD_TYPE);
  t.equal(r.signature.canonicalization, "RFC8785");
  t.equal(r.signer.public_key_sha256, signerA.fingerprint);
  const { signature: _s, ...body } = r;
  t.equal(
    signedMessage(r).toString(),
    `DSSEv1 ${RECEIPT_PAYLOAD_TYPE.length} ${RECEIPT_PAYLOAD_TYPE} ${Buffer.byteLength(canonicalize(body)!)} ${canonicalize(body)}`,
  );
  const v = verifyReceipt(r, opts(oqs));
  t.equal(v.verdict, "valid");
  t.equal(v.valid, true);
  t.deepEqual(
    v.checks.map((c) => c.name),
    [...CHECK_NAMES],
    "the six checks in order",
  );
  t.ok(
    v.checks.every((c) => c.ok && c.detail.length > 0),
    "every check passes with a detail",
  );
  t.equal(v.receipt_id, r.receipt_id);
  t.equal(v.signer_fingerprint, signerA.fingerprint);
  t.end();
});

test("receipts signed by one backend verify with the other", (t) => {
  t.equal(verifyReceipt(issue(signerA), opts(noble)).verdict, "valid", "liboqs-signed, noble-verified");
  t.equal(verifyReceipt(issue(signerB), opts(oqs, signerB)).verdict, "valid", "noble-signed, liboqs-verified");
  t.end();
});

test("the verdict is deterministic and the key order of the JSON does not matter", (t) => {
  const r = issue(signerA);
  const reordered = Object.fromEntries(Object.entries(r).reverse());
  const a = verifyReceipt(r, opts(oqs));
  const b = verifyReceipt(reordered, opts(oqs));
  t.deepEqual(a, b, "same result");
  t.deepEqual(verifyReceipt(clone(r), opts(oqs)), a, "same result again");
  t.end();
});

// Each top-level and nested field changed in turn must fail.
const mutations: Array<[string, (r: Record<string, any>) => void]> = [
  [
    "receipt_id",
    (r) => {
      r.receipt_id = "00000000-0000-4000-8000-000000000000";
    },
  ],
  [
    "serial",
    (r) => {
      r.serial = r.serial + 1;
    },
  ],
  [
    "issued_at",
    (r) => {
      r.issued_at = "2026-11-22T03:55:00.124Z";
    },
  ],
  [
    "artifact.name",
    (r) => {
      r.artifact.name = "other.safetensors";
    },
  ],
  [
    "artifact.sha256",
    (r) => {
      r.artifact.sha256 = "0".repeat(64);
    },
  ],
  [
    "artifact.size_bytes",
    (r) => {
      r.artifact.size_bytes += 1;
    },
  ],
  [
    "artifact.media_type",
    (r) => {
      r.artifact.media_type = "text/plain";
    },
  ],
  [
    "claims (changed)",
    (r) => {
      r.claims.note = "changed";
    },
  ],
  [
    "claims (added)",
    (r) => {
      r.claims.extra = 1;
    },
  ],
  [
    "claims (nested)",
    (r) => {
      r.claims.run.seed = 8;
    },
  ],
  [
    "previous_receipt_sha256",
    (r) => {
      r.previous_receipt_sha256 = "a".repeat(64);
    },
  ],
  [
    "signer.public_key_sha256",
    (r) => {
      r.signer.public_key_sha256 = signerB.fingerprint;
    },
  ],
  [
    "signer.algorithm",
    (r) => {
      r.signer.algorithm = "ML-DSA-44";
    },
  ],
  [
    "signature.algorithm",
    (r) => {
      r.signature.algorithm = "ML-DSA-87";
    },
  ],
  [
    "signature.canonicalization",
    (r) => {
      r.signature.canonicalization = "none";
    },
  ],
  [
    "signature.payload_type",
    (r) => {
      r.signature.payload_type = "application/json";
    },
  ],
  [
    "signature.value (truncated)",
    (r) => {
      r.signature.value = r.signature.value.slice(0, 100);
    },
  ],
  [
    "signature.value (not base64)",
    (r) => {
      r.signature.value = "!!!";
    },
  ],
  [
    "an extra top-level field",
    (r) => {
      r.extra = true;
    },
  ],
  [
    "a missing field",
    (r) => {
      delete r.issued_at;
    },
  ],
  [
    "the signature removed",
    (r) => {
      delete r.signature;
    },
  ],
];

test("changing any field of a receipt gives verdict failed", (t) => {
  const r = issue(signerA);
  for (const [name, mutate] of mutations) {
    const m = clone(r) as Record<string, any>;
    mutate(m);
    const v = verifyReceipt(m, opts(oqs));
    t.equal(v.verdict, "failed", `${name}: failed (${failing(v).join(",")})`);
    t.equal(v.valid, false, `${name}: not valid`);
  }
  t.end();
});

test("a flipped signature bit fails only the signature check", (t) => {
  const r = issue(signerA);
  for (const byte of [0, 1000, 3308]) {
    const sig = Buffer.from(r.signature.value, "base64");
    sig[byte]! ^= 0x10;
    const m = { ...clone(r), signature: { ...r.signature, value: sig.toString("base64") } };
    const v = verifyReceipt(m, opts(oqs));
    t.equal(v.verdict, "failed", `byte ${byte}`);
    t.deepEqual(failing(v), ["signature"], `byte ${byte}: signature check fails`);
  }
  t.end();
});

test("a receipt re-signed by another instance's key fails the signer check under pinning", (t) => {
  const other = issue(signerB);
  const v = verifyReceipt(other, {
    backend: oqs,
    keys: [
      { publicKey: signerB.publicKey, fingerprint: signerB.fingerprint },
      { publicKey: signerA.publicKey, fingerprint: signerA.fingerprint },
    ],
    trustedFingerprints: [signerA.fingerprint],
  });
  t.equal(v.verdict, "failed");
  t.deepEqual(failing(v), ["signer"], "signature is good but the signer is not trusted");
  const unknown = verifyReceipt(other, opts(oqs));
  t.equal(unknown.verdict, "failed");
  t.ok(failing(unknown).includes("signature"), "an unknown key: signature cannot be checked, a failure");
  // naming our key but signed by B
  const forged = clone(other) as Record<string, any>;
  forged.signer.public_key_sha256 = signerA.fingerprint;
  const sig = signerB.sign(signedMessage(forged));
  forged.signature.value = Buffer.from(sig).toString("base64");
  t.deepEqual(failing(verifyReceipt(forged, opts(oqs))), ["signature"], "a receipt naming our key but signed by another fails the signature");
  t.end();
});

test("an unsupported schema is a structured failure with verdict unsupported_schema", (t) => {
  const r = clone(issue(signerA)) as Record<string, any>;
  r.schema = "svc.provenance.receipt.v2";
  const v = verifyReceipt(r, opts(oqs));
  t.equal(v.verdict, "unsupported_schema");
  t.equal(v.valid, false);
  t.equal(v.checks.length, 6, "all six checks reported");
  t.equal(v.checks[0]!.ok, false);
  t.ok(
    v.checks.every((c) => !c.ok),
    "nothing passes",
  );
  t.end();
});

test("inputs that are not receipts fail every check, never throw", (t) => {
  for (const input of [null, 42, "receipt", [], {}, { schema: 5 }, { schema: RECEIPT_SCHEMA }, { schema: RECEIPT_SCHEMA, signer: "x", signature: [] }]) {
    const v = verifyReceipt(input, opts(oqs));
    t.equal(v.verdict, "failed", `${JSON.stringify(input)}: failed`);
    t.equal(v.checks.length, 6);
  }
  t.end();
});

test("a check that throws is a failure of that check", (t) => {
  const r = issue(signerA);
  const throwing: MlDsaBackend = {
    ...oqs,
    verify: () => {
      throw new Error("boom");
    },
  };
  const v = verifyReceipt(r, { ...opts(oqs), backend: throwing });
  t.equal(v.verdict, "failed");
  t.deepEqual(failing(v), ["signature"], "only the signature check fails");
  t.equal(v.checks.find((c) => c.name === "signature")!.detail, "The check could not be carried out.");
  const hostile = new Proxy(
    { ...clone(r) },
    {
      get(target, p) {
        if (p === "claims") throw new Error("trap");
        return Reflect.get(target, p);
      },
    },
  );
  const hv = verifyReceipt(hostile, opts(oqs));
  t.equal(hv.verdict, "failed", "a throwing getter never passes");
  t.end();
});

test("non-I-JSON bodies fail the canonical_body check", (t) => {
  const r = clone(issue(signerA)) as Record<string, any>;
  r.claims = { big: 2 ** 60 };
  t.notOk(failing(verifyReceipt(r, opts(oqs))).includes("canonical_body"), "a large integer has an RFC 8785 form (the changed claims fail the signature)");
  const problem = { kind: "duplicate_name" as const, path: [], message: 'the member name "claims" appears twice in one object' };
  const dup = verifyReceipt(issue(signerA), { ...opts(oqs), textProblem: problem });
  t.deepEqual(failing(dup).slice(0, 1), ["canonical_body"], "a problem of the receipt's text fails canonical_body");
  t.match(dup.checks.find((c) => c.name === "canonical_body")!.detail, /not I-JSON.*"claims" appears twice/);
  r.claims = { s: "\ud800" };
  t.ok(failing(verifyReceipt(r, opts(oqs))).includes("canonical_body"), "a lone surrogate");
  t.throws(() => canonicalBytes({ x: Infinity }), /not finite/);
  t.end();
});

test("artifact commitment: bytes that match pass, other bytes or sizes fail", (t) => {
  const r = issue(signerA);
  t.equal(verifyReceipt(r, { ...opts(oqs), artifact: artifactDigest(bytes) }).verdict, "valid");
  const other = verifyReceipt(r, { ...opts(oqs), artifact: artifactDigest(Buffer.from("model weights v2")) });
  t.deepEqual(failing(other), ["artifact_commitment"]);
  t.end();
});

test("integrity-only mode checks with the named key and says the issuer was not authenticated", (t) => {
  const r = issue(signerB);
  const v = verifyReceipt(r, { backend: oqs, keys: [{ publicKey: signerB.publicKey, fingerprint: signerB.fingerprint }], trustedFingerprints: null });
  t.equal(v.verdict, "valid");
  t.match(v.checks.find((c) => c.name === "signer")!.detail, /not authenticated/);
  t.end();
});

test("the chain hash is the SHA-256 of the canonical whole receipt", (t) => {
  const r1 = issue(signerA, 1, null);
  const r2 = issue(signerA, 2, receiptHash(r1));
  t.equal(r2.previous_receipt_sha256, receiptHash(r1));
  t.match(receiptHash(r1), /^[0-9a-f]{64}$/);
  t.equal(receiptHash(Object.fromEntries(Object.entries(r1).reverse())), receiptHash(r1), "independent of key order");
  t.end();
});

test("assembleReceipt (prepared parts spliced in the critical section) gives byte for byte the receipt of the object path", (t) => {
  const when = new Date("2026-11-22T03:55:00.123Z");
  const id = "0b7e4f5c-8d1a-4c39-9f6e-2a5b7c8d9e0f";
  const claimsCases: Array<Record<string, unknown>> = [
    {},
    { run: { seed: 7 }, note: "ok" },
    { é: "ü", "\u20ac": ["\ud83d\ude00", null, true, false], b: 2.5e-30, a: 0.1, c: -0, d: 1.5e-7, z: { y: { x: [] } } },
    { "": "", '\u0000\n"\\': "\u001f\u007f\u2028", "10": 1, "9": 2, B: 3, a: 4 },
  ];
  const artifacts = [
    artifact,
    { name: 'naïve «model» "q".bin', sha256: "0".repeat(64), size_bytes: 9007199254740991, media_type: "application/vnd.x+json; charset=utf-8" },
  ];
  let n = 0;
  for (const art of artifacts) {
    for (const claims of claimsCases) {
      for (const [serial, previous] of [
        [1, null],
        [42, "ab".repeat(32)],
      ] as const) {
        const prepared = prepareReceipt({ artifact: art, claims }, when, id);
        const assembled = assembleReceipt(prepared, { serial, previous }, signerA.fingerprint, (m) => signerA.signDeterministic(m));
        const body = receiptBody({ artifact: art, claims }, { serial, previous }, signerA.fingerprint, when, id);
        const expected = withSignature(body, signerA.signDeterministic(pae(RECEIPT_PAYLOAD_TYPE, canonicalBytes(body))));
        const got = JSON.parse(assembled.json);
        const same =
          canonicalBytes(got).equals(canonicalBytes(expected)) &&
          assembled.hash === receiptHash(expected) &&
          got.signature.value === expected.signature.value &&
          verifyReceipt(got, opts(oqs)).valid;
        if (same) n++;
        else t.fail(`differs for claims ${JSON.stringify(claims)}, serial ${serial}`);
      }
    }
  }
  t.equal(n, artifacts.length * claimsCases.length * 2, `${n} cases: same canonical bytes, same (deterministic) signature, same chain hash, valid`);
  const r = JSON.parse(
    assembleReceipt(prepareReceipt({ artifact, claims: {} }, when, id), { serial: 3, previous: null }, signerA.fingerprint, signerA.sign).json,
  );
  t.deepEqual(
    Object.keys(r),
    ["schema", "receipt_id", "serial", "issued_at", "artifact", "claims", "previous_receipt_sha256", "signer", "signature"],
    "members in the schema's order",
  );
  t.end();
});

test("assembleReceipt refuses fixed-format members that are not well-formed; prepareReceipt refuses non-I-JSON", (t) => {
  const p = prepareReceipt({ artifact, claims: {} }, new Date(), "0b7e4f5c-8d1a-4c39-9f6e-2a5b7c8d9e0f");
  const sign = (m: Uint8Array) => signerA.sign(m);
  const fp = signerA.fingerprint;
  t.throws(() => assembleReceipt(p, { serial: 0, previous: null }, fp, sign), /serial/, "serial 0");
  t.throws(() => assembleReceipt(p, { serial: 1.5, previous: null }, fp, sign), /serial/, "fractional serial");
  t.throws(() => assembleReceipt(p, { serial: 2, previous: "AB".repeat(32) }, fp, sign), /previous/, "upper-case previous hash");
  t.throws(() => assembleReceipt(p, { serial: 2, previous: '","x":"' }, fp, sign), /previous/, "JSON in the previous hash");
  t.throws(() => assembleReceipt(p, { serial: 1, previous: null }, "zz", sign), /fingerprint/, "bad fingerprint");
  t.throws(() => assembleReceipt({ ...p, receipt_id: 'x","serial":9,"y":"' }, { serial: 1, previous: null }, fp, sign), /receipt id/, "bad receipt id");
  t.throws(() => assembleReceipt({ ...p, issued_at: "yesterday" }, { serial: 1, previous: null }, fp, sign), /instant/, "bad instant");
  t.throws(() => prepareReceipt({ artifact: { ...artifact, name: "\ud800" }, claims: {} }, new Date()), /surrogate/, "a lone surrogate in the artifact");
  t.throws(() => prepareReceipt({ artifact, claims: { x: Number.NaN } }, new Date()), /finite/, "NaN in the claims");
  t.end();
});
