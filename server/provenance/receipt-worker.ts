// Worker thread that holds a copy of the active key and builds whole batches of receipts
// (body, canonical form, ML-DSA-65 signature, chain hash), so the main thread keeps
// parsing and answering HTTP meanwhile and no round trip per receipt is needed.
import { parentPort, workerData } from "node:worker_threads";
import type { BatchResult, Position } from "./chain.js";
import { RECEIPT_PAYLOAD_TYPE, canonicalBytes, pae, receiptBody, receiptHash, withSignature, type IssueInput } from "./receipt.js";
import { createBackend, createSigner, type BackendName } from "./signer.js";

export interface WorkerItem extends IssueInput {
  receipt_id: string;
  issued_at: string;
}

interface Init {
  backend: BackendName;
  publicKey: Uint8Array;
  secretKey: Uint8Array;
}
const init = workerData as Init;
const backend = await createBackend(init.backend);
const signer = createSigner(backend, { publicKey: init.publicKey, secretKey: init.secretKey });
const port = parentPort!;

port.on("message", (m: { id: number; start: Position; items: WorkerItem[] }) => {
  const results: BatchResult[] = [];
  let pos = { ...m.start };
  for (const item of m.items) {
    try {
      const body = receiptBody(item, pos, signer.fingerprint, new Date(item.issued_at), item.receipt_id);
      const receipt = withSignature(body, signer.sign(pae(RECEIPT_PAYLOAD_TYPE, canonicalBytes(body))));
      const hash = receiptHash(receipt);
      results.push({ serial: pos.serial, value: receipt, hash });
      pos = { serial: pos.serial + 1, previous: hash };
    } catch {
      results.push({ error: "The receipt could not be built." });
    }
  }
  port.postMessage({ id: m.id, results });
});
port.postMessage({ ready: true, fingerprint: signer.fingerprint });
