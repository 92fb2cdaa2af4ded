// The bar of one long put or serve on a terminal, fed by createClient's onProgress: a line while
// the client compresses, then the bytes sent or received with the rate and ETA of `svc import`'s
// bar. Nothing is drawn off a terminal (logs get the command's one result line).
import type { TransferProgress } from "../../lib/client-core.js";
import { fmtBytes, type Io } from "./common.js";
import { Progress } from "./progress.js";

export interface TransferBar {
  onProgress(p: TransferProgress): void;
  /** Ends the bar so that the result starts on a fresh line. */
  finish(): void;
}

export function transferBar(io: Io, columns = process.stderr.columns || 100): TransferBar | undefined {
  if (!io.errIsTTY) return undefined;
  let bar: Progress | undefined;
  let phase: TransferProgress["phase"] | undefined;
  const end = () => {
    bar?.finish();
    bar = undefined;
  };
  return {
    onProgress(p) {
      if (p.phase !== phase) {
        end();
        phase = p.phase;
        if (p.phase === "compress") {
          io.err(`Compressing ${fmtBytes(p.total)} here with the engine's codecs before sending it…\n`);
          return;
        }
        bar = new Progress({ write: io.err, isTTY: true, totalItems: 1, totalBytes: p.total, columns, unit: p.phase === "upload" ? "sent" : "received" });
      }
      bar?.moved(p.done);
    },
    finish: end,
  };
}
