#!/usr/bin/env node
// Builds the native addon: cmake-js first (the real build, CUDA when nvcc and the CUDA driver
// are found), node-gyp as the fallback for machines without CMake (CPU only). SVC_WITH_CUDA=0
// builds without CUDA, SVC_WITH_CUDA=1 with it (nvcc needed, driver not); unset, CMake decides.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
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

/** -DSVC_WITH_CUDA for cmake-js from SVC_WITH_CUDA, or [] to let CMakeLists.txt decide. */
function cudaDefine(v) {
  if (v === undefined || v === "") return [];
  if (/^(1|on|true|yes)$/i.test(v)) return ["--CDSVC_WITH_CUDA=ON"];
  if (/^(0|off|false|no)$/i.test(v)) return ["--CDSVC_WITH_CUDA=OFF"];
  console.error(`svc-tensor: SVC_WITH_CUDA must be 1 or 0 (on/off), not '${v}'.`);
  process.exit(1);
}
const cuda = cudaDefine(process.env.SVC_WITH_CUDA);
// `compile` keeps a configured build folder's cache: a different SVC_WITH_CUDA needs a rebuild
let verb = "compile";
try {
  const cached = /^SVC_WITH_CUDA:BOOL=(ON|OFF)$/m.exec(readFileSync(join(root, "build", "CMakeCache.txt"), "utf8"))?.[1];
  if (cuda.length && cached && !cuda[0].endsWith(`=${cached}`)) verb = "rebuild";
} catch {
  /* not configured yet */
}

// SVC_BUILD=node-gyp skips cmake-js (to build or check the fallback on a machine with CMake).
const forceGyp = process.env.SVC_BUILD === "node-gyp";
const cmakeJs = bin("cmake-js", "bin/cmake-js");
const hasCmake = !forceGyp && spawnSync("cmake", ["--version"], { stdio: "ignore" }).status === 0;
if (cmakeJs && hasCmake && run(process.execPath, [cmakeJs, verb, "--out", "build", ...cuda])) process.exit(0);

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
