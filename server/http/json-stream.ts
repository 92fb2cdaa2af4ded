// Large JSON answers written in pieces: one list member of the answer is serialised item by
// item, giving the event loop a turn every few milliseconds and waiting for the socket to
// drain, so a large answer (a search returning 1,000 entries of 64 KiB metadata each) neither
// holds the loop for the whole serialisation nor sits in memory twice as one string.
import type { Response } from "express";
import { Pace } from "../../lib/store/pace.js";

/** Answers below this many bytes of list items are sent with res.json in one piece. */
const SMALL_BYTES = 256 * 1024;

/**
 * Sends `body` as JSON with status 200; `body[listField]` (an array) is written item by item.
 * @example await sendJsonList(res, { namespace, results, total }, "results");
 */
export async function sendJsonList<T extends object>(res: Response, body: T, listField: keyof T & string): Promise<void> {
  const list = body[listField] as unknown as unknown[];
  const pace = new Pace(5);
  const parts: string[] = [];
  let bytes = 0;
  for (const item of list) {
    if (pace.due()) await pace.yield();
    const s = JSON.stringify(item);
    parts.push(s);
    bytes += s.length;
  }
  if (bytes < SMALL_BYTES) {
    res.json(body);
    return;
  }
  // the members before and after the list keep their order
  const head: Record<string, unknown> = {};
  const tail: Record<string, unknown> = {};
  let seen = false;
  for (const [k, v] of Object.entries(body)) {
    if (k === listField) seen = true;
    else (seen ? tail : head)[k] = v;
  }
  const open = JSON.stringify(head).slice(0, -1);
  const close = JSON.stringify(tail).slice(1);
  res.status(200).type("application/json");
  const write = async (s: string) => {
    if (!res.write(s))
      await new Promise<void>((resolve) => {
        const done = () => {
          res.off("drain", done);
          res.off("close", done);
          resolve();
        };
        res.on("drain", done);
        res.on("close", done);
      });
  };
  await write(`${open}${open.length > 1 ? "," : ""}${JSON.stringify(listField)}:[`);
  for (let i = 0; i < parts.length; i++) {
    if (res.destroyed) return;
    if (pace.due()) await pace.yield();
    await write(i === 0 ? parts[i]! : `,${parts[i]}`);
    parts[i] = "";
  }
  res.end(`]${close.length > 1 ? "," : ""}${close}`);
}
