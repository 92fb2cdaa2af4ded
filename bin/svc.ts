#!/usr/bin/env node
// The `svc` command (package bin). Commands live in bin/cli/.
import { main } from "./cli/main.js";
import { processIo } from "./cli/common.js";

process.exitCode = await main(process.argv.slice(2), processIo());
