#!/usr/bin/env node
// Offline verifier of an evidence bundle (ZIP or json-dir): no network, no appliance.
import { runCli } from "../server/provenance/cli.js";
import { verifyBundleCli } from "./cli/verify-bundle.js";

await runCli(() => verifyBundleCli(process.argv.slice(2)));
