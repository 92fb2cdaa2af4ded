#!/usr/bin/env node
// Offline verifier of one provenance receipt: no network, no appliance.
import { runCli } from "../server/provenance/cli.js";
import { verifyReceiptCli } from "./cli/verify-receipt.js";

await runCli(() => verifyReceiptCli(process.argv.slice(2)));
