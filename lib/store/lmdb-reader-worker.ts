// Worker thread of lib/store/lmdb-reader.ts: opens the store's LMDB environment (lmdb-js
// shares one environment between the threads of a process) and copies values of
// payload_large out of it, so that the copy, a few milliseconds per MiB, is not made on the
// event loop. The copy is moved to the main thread, not copied again.
import { parentPort, workerData } from "node:worker_threads";
import { open } from "lmdb";
import { lowerThreadPriority } from "../worker-code.js";

const port = parentPort!;
lowerThreadPriority();
const root = open({ path: (workerData as { path: string }).path, maxDbs: 8, overlappingSync: false, noSubdir: false });
const large = root.openDB<Buffer, Buffer>({ name: "payload_large", encoding: "binary", keyEncoding: "binary" });

port.on("message", (m: { id: number; key: Uint8Array } | { close: true }) => {
  if ("close" in m) {
    void root.close().then(() => process.exit(0));
    return;
  }
  let bytes: Uint8Array | undefined;
  try {
    const v = large.getBinary(Buffer.from(m.key.buffer, m.key.byteOffset, m.key.byteLength));
    if (v !== undefined) bytes = v.byteOffset === 0 && v.byteLength === v.buffer.byteLength ? v : new Uint8Array(v);
  } catch {
    bytes = undefined; // read again on the main thread
  }
  port.postMessage({ id: m.id, bytes }, bytes ? [bytes.buffer as ArrayBuffer] : []);
});
port.postMessage({ ready: true });
