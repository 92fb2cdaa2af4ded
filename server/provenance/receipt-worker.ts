// Worker thread that holds a copy of the active key and runs the chain's critical section
// for whole batches of receipts (canonical body from prepared parts, ML-DSA-65 signature,
// chain hash), so the main thread keeps parsing and answering HTTP meanwhile and no
// round trip per receipt is needed.
import { parentPort, workerData } from "node:worker_threads";
import type { BatchResult, Position } from "./chain.js";
import { assembleReceipt, type PreparedReceipt } from "./receipt.js";
import { createBackend, createSigner, type BackendName } from "./signer.js";

interface Init {
  backend: BackendName;
  publicKey: Uint8Array;
  secretKey: Uint8Array;
}
const init = workerData as Init;
const backend = await createBackend(init.backend);
const signer = createSigner(backend, { publicKey: init.publicKey, secretKey: init.secretKey });
const port = parentPort!;

port.on("message", (m: { id: number; start: Position; items: PreparedReceipt[] }) => {
  const results: BatchResult[] = [];
  let pos = { ...m.start };
  for (const item of m.items) {
    try {
      const { json, hash } = assembleReceipt(item, pos, signer.fingerprint, signer.sign);
      results.push({ serial: pos.serial, value: json, hash });
      pos = { serial: pos.serial + 1, previous: hash };
    } catch {
      results.push({ error: "The receipt could not be built." });
    }
  }
  port.postMessage({ id: m.id, results });
});
port.postMessage({ ready: true, fingerprint: signer.fingerprint });
