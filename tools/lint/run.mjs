#!/usr/bin/env node
// `npm run lint`: installs the lint tools into tools/lint/node_modules on first use (their own
// lockfile, apart from the project's dependencies), then runs eslint over the TypeScript with a
// content-keyed cache in node_modules/.cache, so a second run checks only what changed. Then it
// type-checks the web console against the server's types and, when clang-format is on PATH,
// checks that native/ is formatted as .clang-format says.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";

const root = new URL("../..", import.meta.url).pathname;
const tools = join(root, "tools", "lint");
const eslint = join(tools, "node_modules", "eslint", "bin", "eslint.js");

function run(cmd, args, cwd) {
  const r = spawnSync(cmd, args, { cwd, stdio: "inherit" });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

if (!existsSync(eslint)) run("npm", ["ci", "--no-audit", "--no-fund", "--loglevel=error"], tools);
// Formatting of the TypeScript and the scripts, as .prettierrc.json says (`npm run format` writes it).
const prettier = join(tools, "node_modules", "prettier", "bin", "prettier.cjs");
const FORMATTED = [
  "lib/**/*.ts",
  "server/**/*.ts",
  "bin/**/*.ts",
  "test/**/*.ts",
  "bench/**/*.ts",
  "web/console/**/*.ts",
  "scripts/**/*.mjs",
  "tools/lint/*.mjs",
];
const write = process.argv.includes("--write");
run(
  process.execPath,
  [
    prettier,
    write ? "--write" : "--check",
    "--log-level",
    write ? "warn" : "log",
    "--cache",
    "--cache-strategy",
    "content",
    "--cache-location",
    join(root, "node_modules", ".cache", "prettier", ".prettier-cache"),
    ...FORMATTED,
  ],
  root,
);
if (write) process.exit(0);

run(
  process.execPath,
  [
    eslint,
    "-c",
    join(tools, "eslint.config.mjs"),
    "--max-warnings",
    "0",
    "--cache",
    "--cache-strategy",
    "content",
    "--cache-location",
    join(root, "node_modules", ".cache", "eslint"),
    "lib",
    "server",
    "bin",
    "test",
    "bench",
  ],
  root,
);

// The web console: its own program (DOM, no Node), then its answer types against the server's
// (web/console/server-types.check.ts), with the project's compiler.
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
for (const config of ["tsconfig.json", "tsconfig.check.json"]) {
  run(process.execPath, [tsc, "-p", join(root, "web", "console", config), "--noEmit"], root);
}

// The native sources: native/*.cc, native/*.h, native/cuda/*.cu, native/cuda/*.cuh.
function nativeFiles() {
  const out = [];
  for (const [dir, exts] of [
    ["native", [".cc", ".h"]],
    [join("native", "cuda"), [".cu", ".cuh"]],
  ]) {
    if (!existsSync(join(root, dir))) continue;
    for (const name of readdirSync(join(root, dir)).sort()) {
      if (exts.some((e) => name.endsWith(e))) out.push(join(dir, name));
    }
  }
  return out;
}

const probe = spawnSync("clang-format", ["--version"], { stdio: "ignore" });
if (probe.error || probe.status !== 0) {
  console.log("lint: clang-format not found on PATH, native format check skipped");
} else {
  run("clang-format", ["--style=file", "--dry-run", "-Werror", ...nativeFiles()], root);
}

// No native file over 900 lines: a file that grows past it is split by concept.
const MAX_NATIVE_LINES = 900;
const long = nativeFiles()
  .map((f) => [f, readFileSync(join(root, f), "utf8").split("\n").length - 1])
  .filter(([, n]) => n > MAX_NATIVE_LINES);
for (const [f, n] of long) console.error(`lint: ${f} has ${n} lines, more than ${MAX_NATIVE_LINES}; split it by concept.`);
if (long.length > 0) process.exit(1);

// Both native builds compile every C++ source: CMake (the real build) and node-gyp (its
// fallback on machines without CMake), so a source added to one list is added to the other.
const cc = readdirSync(join(root, "native")).filter((f) => f.endsWith(".cc"));
const lists = { "CMakeLists.txt": readFileSync(join(root, "CMakeLists.txt"), "utf8"), "binding.gyp": readFileSync(join(root, "binding.gyp"), "utf8") };
const unlisted = cc.flatMap((f) => Object.entries(lists).flatMap(([name, text]) => (text.includes(`native/${f}`) ? [] : [[f, name]])));
for (const [f, name] of unlisted) console.error(`lint: native/${f} is not compiled by ${name}; list it there as in the other build.`);
if (unlisted.length > 0) process.exit(1);
