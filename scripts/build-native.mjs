#!/usr/bin/env node
// Builds the native addon: cmake-js first (the real build, CUDA when nvcc is found),
// node-gyp as the fallback for machines without CMake (CPU only).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const require = createRequire(import.meta.url);
const root = new URL("..", import.meta.url).pathname;

function run(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit", env: process.env });
  return r.status === 0;
}

function bin(pkg, rel) {
  try {
    return require.resolve(`${pkg}/${rel}`);
  } catch {
    return null;
  }
}

// SVC_BUILD=node-gyp skips cmake-js (to build or check the fallback on a machine with CMake).
const forceGyp = process.env.SVC_BUILD === "node-gyp";
const cmakeJs = bin("cmake-js", "bin/cmake-js");
const hasCmake = !forceGyp && spawnSync("cmake", ["--version"], { stdio: "ignore" }).status === 0;
if (cmakeJs && hasCmake && run(process.execPath, [cmakeJs, "compile", "--out", "build"])) process.exit(0);

console.error("svc-tensor: cmake-js build unavailable or failed; falling back to node-gyp (CPU only).");
// Offline, node-gyp can only use headers already here: the ones installed beside this node
// (include/node), unless a nodedir is configured already.
const prefix = join(dirname(process.execPath), "..");
const gypArgs = ["rebuild"];
if (!process.env.npm_config_nodedir && existsSync(join(prefix, "include", "node", "node_api.h"))) gypArgs.push(`--nodedir=${prefix}`);
const gyp = bin("node-gyp", "bin/node-gyp.js");
if (gyp && run(process.execPath, [gyp, ...gypArgs])) process.exit(0);
if (!gyp && run("node-gyp", gypArgs)) process.exit(0);
console.error("svc-tensor: the native addon could not be built (need CMake or node-gyp and a C++17 compiler).");
process.exit(1);
