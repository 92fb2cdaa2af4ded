#!/usr/bin/env node
// The `svc` program (package bin). Commands live in bin/cli/.
import { main, interruptedLine } from "./cli/main.js";
import { processIo } from "./cli/common.js";

const argv = process.argv.slice(2);
// the servers stop cleanly on these signals themselves; any other command says what it leaves
const line = interruptedLine(argv[0]);
if (line !== null) {
  for (const [sig, code] of [
    ["SIGINT", 130],
    ["SIGTERM", 143],
  ] as const) {
    process.once(sig, () => {
      process.stderr.write(`\n${line}\n`);
      process.exit(code);
    });
  }
}
process.exitCode = await main(argv, processIo());
