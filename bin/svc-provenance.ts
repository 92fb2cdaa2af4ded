#!/usr/bin/env node
// The provenance appliance: serve (first boot included), init, rotate-key, public-key.
import { loadConfig } from "../server/provenance/config.js";
import { EXIT, UsageError, parse, runCli } from "../server/provenance/cli.js";
import { bootstrap, loadKeyring, publicKeyDocument, rotateKey } from "../server/provenance/keys.js";
import { lockHome, startProvenance } from "../server/provenance/server.js";
import { createBackend } from "../server/provenance/signer.js";

const HELP = `Usage: svc-provenance <command>

Commands:
  serve        start the appliance (first boot included) on SVC_PROVENANCE_HOST:SVC_PROVENANCE_PORT
  init         first boot only: create the keypair and the admin API key, then exit
  rotate-key   make a new active keypair and retire the old one (stop the service first)
  public-key   print the public-key JSON, for pinning in the offline verifiers

On the boot that creates it, the admin API key is printed once on standard output as
SVC_PROVENANCE_ADMIN_KEY=<key>; only its SHA-256 is stored. Store it in a secret manager.

Environment: SVC_PROVENANCE_HOME (/var/lib/svc-provenance), SVC_PROVENANCE_CONFIG
(/etc/svc-provenance/service.env), SVC_PROVENANCE_BACKEND (liboqs|noble),
SVC_PROVENANCE_HOST (127.0.0.1), SVC_PROVENANCE_PORT (8001), SVC_PROVENANCE_METRICS_TOKEN,
SVC_PROVENANCE_MAX_BODY_BYTES (32 MiB), SVC_PROVENANCE_MAX_RECEIPT_BODY_BYTES (4 MiB),
SVC_PROVENANCE_BODY_BUDGET_BYTES (64 MiB), SVC_PROVENANCE_BODY_MIN_RATE (16384 bytes/s),
SVC_PROVENANCE_BODY_GRACE_S (10).
Exit codes: 0 success, 1 failure, 2 usage or configuration error.
`;

function printAdminKey(key: string | null | undefined): void {
  if (key) process.stdout.write(`SVC_PROVENANCE_ADMIN_KEY=${key}\n`);
}

await runCli(async () => {
  const { values, positionals } = parse(process.argv.slice(2), { help: { type: "boolean", short: "h" } }, true);
  const cmd = positionals[0];
  if (values.help || cmd === "help") {
    process.stdout.write(HELP);
    return EXIT.valid;
  }
  if (positionals.length > 1) throw new UsageError(`Unexpected argument ${JSON.stringify(positionals[1])}; see --help`);
  switch (cmd) {
    case "serve": {
      const config = loadConfig();
      const running = await startProvenance(config, { onAdminKey: printAdminKey });
      await new Promise<void>((resolve) => {
        const stop = (): void => {
          process.off("SIGINT", stop);
          process.off("SIGTERM", stop);
          void running.close().then(resolve);
        };
        process.on("SIGINT", stop);
        process.on("SIGTERM", stop);
      });
      return EXIT.valid;
    }
    case "init": {
      const config = loadConfig();
      const boot = await bootstrap(config, await createBackend(config.backend));
      printAdminKey(boot.adminKey);
      for (const w of boot.warnings) process.stderr.write(`Warning: ${w}\n`);
      process.stderr.write(
        `${boot.createdKeypair ? "Created" : "Kept"} the signing key ${boot.keyring.active.fingerprint}; ` +
          `${boot.adminKey ? "created the admin API key (printed above, shown once)" : "the admin API key already exists"}.\n`,
      );
      return EXIT.valid;
    }
    case "rotate-key": {
      const config = loadConfig();
      // Not while an appliance serves this home (it would go on signing with the retired key),
      // and never two rotations at once (one of the keys would be lost unlisted).
      const release = await lockHome(config.home);
      let k;
      try {
        k = await rotateKey(config.home, await createBackend(config.backend));
      } finally {
        await release();
      }
      process.stdout.write(JSON.stringify({ fingerprint: k.active.fingerprint, retired: k.retired.map((r) => r.fingerprint) }) + "\n");
      process.stderr.write("Rotated the signing key; start the service again to sign with the new key.\n");
      return EXIT.valid;
    }
    case "public-key": {
      const config = loadConfig();
      process.stdout.write(JSON.stringify(publicKeyDocument(await loadKeyring(config.home)), null, 2) + "\n");
      return EXIT.valid;
    }
    case undefined:
      throw new UsageError("A command is required (serve, init, rotate-key or public-key); see --help");
    default:
      throw new UsageError(`Unknown command ${JSON.stringify(cmd)}; see --help`);
  }
});
