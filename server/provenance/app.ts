// The appliance's HTTP surface as a factory: tests drive it without listen, and only
// bin/ listens. Dependencies (keys, signer, chain, clock, metrics, log) come in `deps`.
import express, { type NextFunction, type Request, type Response } from "express";
import { z } from "zod";
import { ConflictError, UnauthorizedError, UnsupportedMediaTypeError, NotFoundError, SvcError, ValidationError } from "../../lib/errors.js";
import { parseOrThrow } from "../../lib/names.js";
import { errorMiddleware } from "../http/errors.js";
import { requestId, requestIdOf } from "../http/request-id.js";
import { buildBundleFiles, writeZip } from "./bundle.js";
import type { ReceiptChain } from "./chain.js";
import { publicKeyDocument, secretMatches, type Keyring } from "./keys.js";
import type { ProvenanceMetrics } from "./metrics.js";
import {
  RECEIPT_PAYLOAD_TYPE, RECEIPT_SCHEMA, artifactDigest, isBase64, artifactSchema, canonicalBytes, claimsSchema, pae, receiptBody, receiptHash,
  receiptSchema, verifyReceipt, withSignature,
  type Artifact, type Receipt, type VerifyResult,
} from "./receipt.js";
import { randomUUID } from "node:crypto";
import { ALGORITHM, type MlDsaBackend, type Signer } from "./signer.js";

export type LogFn = (entry: Record<string, unknown>) => void;

export interface AppDeps {
  /** The keys of this instance: the active one signs, the retired ones still verify. */
  keyring: Keyring;
  /** Signs with the active key (bundles; receipts too unless the chain is batched). */
  signer: Signer;
  backend: MlDsaBackend;
  /** The backend's status, read at each /health (a constant, or a live check). */
  backendStatus: "ok" | "failing" | (() => "ok" | "failing");
  chain: ReceiptChain;
  adminKeySha256: string;
  /** SHA-256 of SVC_PROVENANCE_METRICS_TOKEN, or null. */
  metricsTokenSha256: string | null;
  metrics: ProvenanceMetrics;
  clock: () => Date;
  version: string;
  log: LogFn;
  /** Largest JSON body accepted (default 32 MiB, enough for a 24 MiB artifact_b64). */
  maxBodyBytes?: number;
}

const b64Field = (name: string) => z.string().refine(isBase64, `${name} must be base64`);

const exactBody = z
  .strictObject({
    artifact: z.record(z.string(), z.unknown()).optional(),
    artifact_b64: b64Field("artifact_b64").optional(),
    claims: claimsSchema.optional(),
  })
  .refine((b) => b.artifact !== undefined || b.artifact_b64 !== undefined, { message: "artifact or artifact_b64 is required", path: ["artifact"] });

// With artifact_b64 the appliance hashes the bytes; artifact may then carry only
// name and media_type, and any sha256/size_bytes given must agree with the bytes.
const partialArtifact = artifactSchema.partial();

const verifyBody = z.strictObject({
  receipt: z.unknown().refine((v) => v !== undefined, "receipt is required"),
  artifact_b64: b64Field("artifact_b64").optional(),
});

function bearer(req: Request): string | null {
  const h = req.get("authorization");
  if (!h) return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
  return m ? m[1]! : null;
}

export function createApp(deps: AppDeps): express.Express {
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  const trusted = [deps.keyring.active, ...deps.keyring.retired].map((k) => ({ publicKey: k.publicKey, fingerprint: k.fingerprint }));
  const publicKeyDoc = publicKeyDocument(deps.keyring);
  const m = deps.metrics;

  const requireAdmin = (req: Request, _res: Response, next: NextFunction): void => {
    const token = bearer(req);
    next(token !== null && secretMatches(token, deps.adminKeySha256) ? undefined : new UnauthorizedError("Missing or invalid admin API key."));
  };
  const requireMetricsReader = (req: Request, _res: Response, next: NextFunction): void => {
    const token = bearer(req);
    const ok = token !== null &&
      (secretMatches(token, deps.adminKeySha256) || (deps.metricsTokenSha256 !== null && secretMatches(token, deps.metricsTokenSha256)));
    next(ok ? undefined : new UnauthorizedError("Missing or invalid admin API key or metrics token."));
  };
  const requireJson = (req: Request, _res: Response, next: NextFunction): void => {
    const len = req.headers["content-length"];
    const hasBody = req.headers["transfer-encoding"] !== undefined || (len !== undefined && len !== "0");
    if (!hasBody) return next(new ValidationError("The request body must be a JSON object."));
    next(req.is("application/json") ? undefined : new UnsupportedMediaTypeError("Requests must have Content-Type application/json."));
  };
  const verifyWith = (receipt: unknown, artifactB64: string | undefined): VerifyResult =>
    verifyReceipt(receipt, {
      backend: deps.backend,
      keys: trusted,
      trustedFingerprints: trusted.map((k) => k.fingerprint),
      artifact: artifactB64 !== undefined ? artifactDigest(Buffer.from(artifactB64, "base64")) : undefined,
    });

  // 1. request id: echoed on every response, the key of every log line
  app.use(requestId);
  // 2. timing and the one log line per request (method, route, status; never bodies or headers)
  app.use((req, res, next) => {
    const start = process.hrtime.bigint();
    res.on("finish", () => {
      const s = Number(process.hrtime.bigint() - start) / 1e9;
      const route = (req.route?.path as string | undefined) ?? "unmatched";
      m.requestDuration.observe({ method: req.method, route, status: String(res.statusCode) }, s);
      deps.log({ msg: "request", method: req.method, route, status: res.statusCode, duration_ms: Math.round(s * 1e6) / 1e3, request_id: requestIdOf(res) });
    });
    next();
  });
  // 3. JSON bodies, size-limited before they are read (413 from Content-Length); mounted per
  // route after authentication, so an unauthenticated caller never gets a body parsed
  const json = express.json({ limit: deps.maxBodyBytes ?? 32 * 1024 * 1024, strict: true });

  app.get("/health", (_req, res) => {
    const status = typeof deps.backendStatus === "function" ? deps.backendStatus() : deps.backendStatus;
    const ok = status === "ok";
    res.status(ok ? 200 : 503).json({
      status: ok ? "ok" : "degraded",
      receipt_schema: RECEIPT_SCHEMA,
      signing_algorithm: ALGORITHM,
      backend: { name: deps.backend.name, version: deps.backend.version, status },
    });
  });

  app.get("/v1/provenance/public-key", (_req, res) => {
    res.json(publicKeyDoc);
  });

  app.post("/v1/provenance/exact", requireAdmin, requireJson, json, async (req, res, next) => {
    try {
      const body = parseOrThrow(exactBody, req.body ?? {}, "body");
      let artifact: Artifact;
      if (body.artifact_b64 !== undefined) {
        const given = parseOrThrow(partialArtifact, body.artifact ?? {}, "artifact");
        const d = artifactDigest(Buffer.from(body.artifact_b64, "base64"));
        if (given.sha256 !== undefined && given.sha256 !== d.sha256) throw new ValidationError("artifact.sha256 does not match the SHA-256 of artifact_b64.", "artifact.sha256");
        if (given.size_bytes !== undefined && given.size_bytes !== d.size_bytes) throw new ValidationError("artifact.size_bytes does not match the length of artifact_b64.", "artifact.size_bytes");
        artifact = parseOrThrow(artifactSchema, {
          name: given.name ?? "artifact",
          media_type: given.media_type ?? "application/octet-stream",
          ...d,
        }, "artifact");
      } else {
        artifact = parseOrThrow(artifactSchema, body.artifact, "artifact");
      }
      const claims = body.claims ?? {};
      // a batched chain builds and signs in its worker thread; else here, one at a time
      const receipt = deps.chain.batched
        ? await deps.chain.appendInput<Receipt>({ artifact, claims, receipt_id: randomUUID(), issued_at: deps.clock().toISOString() })
        : await deps.chain.append((pos) => {
            const body = receiptBody({ artifact, claims }, pos, deps.signer.fingerprint, deps.clock());
            const r = withSignature(body, deps.signer.sign(pae(RECEIPT_PAYLOAD_TYPE, canonicalBytes(body))));
            return { value: r, hash: receiptHash(r) };
          });
      m.receiptsIssued.inc();
      res.status(201).json(receipt);
    } catch (e) {
      next(e);
    }
  });

  app.post("/v1/provenance/verify", requireJson, json, (req, res, next) => {
    try {
      const body = parseOrThrow(verifyBody, req.body ?? {}, "body");
      const result = verifyWith(body.receipt, body.artifact_b64);
      m.verifications.inc({ verdict: result.verdict });
      res.status(result.valid ? 200 : 422).json(result);
    } catch (e) {
      next(e);
    }
  });

  app.post("/v1/provenance/evidence-bundle", requireAdmin, requireJson, json, async (req, res, next) => {
    try {
      const body = parseOrThrow(verifyBody, req.body ?? {}, "body");
      const result = verifyWith(body.receipt, body.artifact_b64);
      m.verifications.inc({ verdict: result.verdict });
      if (!result.valid) {
        res.status(422).json({
          detail: "The receipt did not verify, so no evidence bundle was exported.",
          request_id: requestIdOf(res),
          ...result,
        });
        return;
      }
      const receipt = receiptSchema.parse(body.receipt);
      if (receipt.signer.public_key_sha256 !== deps.signer.fingerprint) {
        throw new ConflictError("The receipt was signed by a retired key; bundles are signed by the receipt's own key, so only receipts of the active key can be exported.");
      }
      const zip = await writeZip(buildBundleFiles({
        receipt,
        verification: result,
        signer: deps.signer,
        exportedAt: deps.clock(),
        applianceVersion: deps.version,
      }));
      m.bundlesExported.inc();
      res.status(200)
        .type("application/zip")
        .setHeader("Content-Disposition", `attachment; filename="evidence-${receipt.receipt_id}.zip"`)
        .send(zip);
    } catch (e) {
      next(e);
    }
  });

  app.get("/metrics", requireMetricsReader, async (_req, res, next) => {
    try {
      res.type(m.registry.contentType).send(await m.registry.metrics());
    } catch (e) {
      next(e);
    }
  });

  app.use((_req, _res, next) => next(new NotFoundError("No such endpoint.")));
  // last: one error body for everything; unexpected errors are logged by code only
  app.use(errorMiddleware(requestIdOf, (e: SvcError, raw: unknown) => {
    if (e.code === "internal") deps.log({ msg: "internal error", error: raw instanceof Error ? raw.name : typeof raw });
  }));
  return app;
}
