#!/usr/bin/env node
// Builds the native addon: cmake-js first (the real build, CUDA when nvcc is found),
// node-gyp as the fallback for machines without CMake (CPU only).
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";

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

const cmakeJs = bin("cmake-js", "bin/cmake-js");
const hasCmake = spawnSync("cmake", ["--version"], { stdio: "ignore" }).status === 0;
if (cmakeJs && hasCmake && run(process.execPath, [cmakeJs, "compile", "--out", "build"])) process.exit(0);

console.error("svc-tensor: cmake-js build unavailable or failed; falling back to node-gyp (CPU only).");
const gyp = bin("node-gyp", "bin/node-gyp.js");
if (gyp && run(process.execPath, [gyp, "rebuild"])) process.exit(0);
if (!gyp && run("node-gyp", ["rebuild"])) process.exit(0);
console.error("svc-tensor: the native addon could not be built (need CMake or node-gyp and a C++17 compiler).");
process.exit(1);
