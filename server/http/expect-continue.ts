// Requests sent with `Expect: 100-continue`: their clients (curl, for a body over 1 MiB) wait
// for "100 Continue" before sending the body. Node sends it at once unless the server handles
// 'checkContinue'; the gateway does, so that a request it refuses before reading the body (an
// unknown key, a tenant over its rate limit, a body over the upload limit) is answered without
// the client sending it. Node closes such a connection after the answer.
import type { ServerResponse } from "node:http";

const owed = new WeakSet<ServerResponse>();

/** Marks a response whose client waits for 100 Continue (a request taken at 'checkContinue'). */
export function holdContinue(res: ServerResponse): void {
  owed.add(res);
}

/** Whether the client of `res` still waits for 100 Continue: its body has not been asked for. */
export function continueOwed(res: ServerResponse): boolean {
  return owed.has(res);
}

/** Sends the 100 Continue that the client of `res` waits for, once, right before its body is read. */
export function sendContinue(res: ServerResponse): void {
  if (!owed.delete(res) || res.headersSent || res.destroyed) return;
  res.writeContinue();
}
