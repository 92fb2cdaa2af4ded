#!/usr/bin/env node
// Builds the web console into dist/console: web/console/src/main.ts bundled with its libraries
// (uPlot, the viridis ramp) into app.js, style.css with uPlot's styles into app.css, and
// index.html copied. The gateway serves that folder at /console. An argument names another
// output folder (tests build a copy of their own there).
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";

const root = new URL("..", import.meta.url).pathname;
const src = join(root, "web", "console");
const out = process.argv[2] ?? join(root, "dist", "console");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: join(src, "src", "main.ts") },
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  platform: "browser",
  outdir: out,
  legalComments: "eof",
  logLevel: "warning",
});
await build({
  entryPoints: { app: join(src, "style.css") },
  bundle: true,
  minify: true,
  outdir: out,
  logLevel: "warning",
});
copyFileSync(join(src, "index.html"), join(out, "index.html"));
