// Preload for the memory tests: prints the process's peak resident set size on exit.
process.on("exit", () => {
  process.stderr.write(`MAXRSS_KIB ${process.resourceUsage().maxRSS}\n`);
});
