// Closing a server the way a restart should look to its clients.
import type { Server } from "node:http";

/** How long a server's close waits for the requests under way before it cuts their connections. */
export const CLOSE_GRACE_MS = 10_000;

/**
 * Closes `server`: no new connection is accepted; connections idle at that moment are closed at
 * once; a request under way is answered in full, and its connection closed once it is idle
 * (the keep-alive wait, 5 s by default, drops to Node's minimum of about a second); whatever is
 * still open after `graceMs` is cut. Resolves once every connection is gone.
 * @example await closeGracefully(server);
 */
export function closeGracefully(server: Server, graceMs = CLOSE_GRACE_MS): Promise<void> {
  return new Promise<void>((resolve) => {
    const cut = setTimeout(() => server.closeAllConnections(), graceMs);
    cut.unref();
    server.keepAliveTimeout = 1;
    server.close(() => {
      clearTimeout(cut);
      resolve();
    });
  });
}
