// How the project starts its worker threads: the code of a Worker (with `eval: true`) that
// imports the module next to the caller, whether the caller runs from its TypeScript sources
// (tsx: the worker registers tsx itself first) or from the compiled JavaScript in dist/.

/**
 * @example new Worker(workerCode(import.meta.url, "offload-worker"), { eval: true })
 */
export function workerCode(callerUrl: string, name: string): string {
  const fromSource = callerUrl.endsWith(".ts");
  const url = new URL(`./${name}${fromSource ? ".ts" : ".js"}`, callerUrl).href;
  return fromSource
    ? `import("tsx/esm/api").then((m) => { m.register(); return import(${JSON.stringify(url)}); })`
    : `import(${JSON.stringify(url)})`;
}
