// Worker thread that holds a copy of the active key and signs receipt messages, so the
// main thread keeps parsing and answering HTTP while ML-DSA-65 runs here.
import { parentPort, workerData } from "node:worker_threads";
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
port.on("message", (m: { id: number; message: Uint8Array }) => {
  try {
    port.postMessage({ id: m.id, signature: signer.sign(m.message) });
  } catch {
    port.postMessage({ id: m.id, error: true });
  }
});
port.postMessage({ ready: true, fingerprint: signer.fingerprint });
