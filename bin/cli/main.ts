// The `svc` program: one entry point, one module per command group. Every command prints
// --help, exits 0 on success, 1 on a failure of the work and 2 on a usage error, and writes
// errors to standard error as one sentence (a stack only with SVC_ENGINE_LOG_LEVEL=debug).
// Each command's module is imported only when that command runs: `svc --help` loads this file
// and common.ts, a data command the client, and only the server commands load the servers.
import { reportError, UsageError, type Io, shown } from "./common.js";
import { SvcError } from "../../lib/errors.js";

export const HELP = `svc — tensor-train storage service

Usage: svc COMMAND [ARGS] [--help]

Server:
  up [--data DIR] [--port 8080] [--engine-port 8000] [--host 127.0.0.1] [--redis URL] [--store postgres://...] [--log-level L] [--compact-at HH:MM|off]
                         engine + gateway on an embedded store (or PostgreSQL), one command
  engine                 the engine alone, configured by SVC_ENGINE_* variables
  gateway                the gateway alone, configured by SVC_GATE_* variables
  backup --to DIR [--store PATH] [--compact]
                         a consistent copy of an engine's store, taken while it runs
  restore --from DIR --to PATH
                         a backup restored as a new store directory
  migrate --from SRC --to DST
                         copy a store between an LMDB directory and PostgreSQL (resumable)
  compact [--store PATH|URL]
                         purge expired deletes and unused payloads, while engines serve

Admin (service key from SVC_GATE_ENGINE_SERVICE_KEY or ./svc-data/service.key; gateway at SVC_GATE_URL):
  tenant create ID [--plan P] [--namespace NS]... [--email E]
  tenant rotate-key ID | add-namespace ID NS | set-plan ID PLAN | deactivate ID | list
  key create TENANT NAME [--scopes read|read,write] [--namespace NS]... [--expires ISO] | ls TENANT | revoke KEY_ID
  usage [ID] [--period YYYY-MM] [--mine]   (--mine: SVC_API_KEY's own usage, no service key)
  audit [--tenant ID] [--status CODE] [--limit N]
  reload

Data (tenant key from SVC_API_KEY; gateway at SVC_GATE_URL, default http://127.0.0.1:8080):
  put NS KEY FILE.npy | put NS KEY FILE --dtype D --shape a,b,c | put NS KEY FILE --bytes
                         [--tolerance T] [--max-rank R] [--meta JSON]
  get NS KEY [--version N]
  ls NS [--prefix P]
  search NS [--filter JSON] [--limit N]
  topk NS KEY [--k N] [--metric cosine|dot|l2] [--filter JSON]
  rm NS KEY
  serve NS KEY -o OUT.npy [--slice 0:16,:,:]
  import NS DIR

Run 'svc COMMAND --help' (or 'svc help COMMAND') for a command's options.
`;

type Command = (argv: string[], io: Io) => Promise<number>;

const COMMANDS: Record<string, Command> = {
  up: async (a, io) => (await import("./up.js")).upCommand(a, io),
  engine: async (a, io) => (await import("./up.js")).engineCommand(a, io),
  gateway: async (a, io) => (await import("./up.js")).gatewayCommand(a, io),
  backup: async (a, io) => (await import("./backup.js")).backupCommand(a, io),
  restore: async (a, io) => (await import("./backup.js")).restoreCommand(a, io),
  migrate: async (a, io) => (await import("./migrate.js")).migrateCommand(a, io),
  compact: async (a, io) => (await import("./compact.js")).compactCommand(a, io),
  tenant: async (a, io) => (await import("./admin.js")).tenantCommand(a, io),
  key: async (a, io) => (await import("./keys.js")).keyCommand(a, io),
  usage: async (a, io) => (await import("./admin.js")).usageCommand(a, io),
  reload: async (a, io) => (await import("./admin.js")).reloadCommand(a, io),
  audit: async (a, io) => (await import("./audit.js")).auditCommand(a, io),
  put: async (a, io) => (await import("./data.js")).putCommand(a, io),
  get: async (a, io) => (await import("./data.js")).getCommand(a, io),
  ls: async (a, io) => (await import("./data.js")).lsCommand(a, io),
  rm: async (a, io) => (await import("./data.js")).rmCommand(a, io),
  serve: async (a, io) => (await import("./data.js")).serveCommand(a, io),
  search: async (a, io) => (await import("./data.js")).searchCommand(a, io),
  topk: async (a, io) => (await import("./data.js")).topkCommand(a, io),
  import: async (a, io) => (await import("./import.js")).importCommand(a, io),
};

/** Runs `svc ARGV…`; returns the exit code. */
export async function main(argv: string[], io: Io): Promise<number> {
  const [cmd, ...rest] = argv;
  const hint = cmd && COMMANDS[cmd] ? `Run 'svc ${cmd} --help' for usage.` : "Run 'svc --help' for usage.";
  try {
    if (cmd === undefined) throw new UsageError("Missing command.");
    if (cmd === "help" && rest.length > 0 && COMMANDS[rest[0]!]) return await COMMANDS[rest[0]!]!([...rest.slice(1), "--help"], io);
    if (cmd === "--help" || cmd === "-h" || cmd === "help") {
      io.out(HELP);
      return 0;
    }
    if (cmd === "--version") {
      const { readFileSync } = await import("node:fs");
      // the nearest package.json of this package, from the sources or from dist/
      for (let u = new URL("./", import.meta.url); u.pathname !== "/"; u = new URL("../", u)) {
        try {
          const p = JSON.parse(readFileSync(new URL("package.json", u), "utf8")) as { name?: string; version?: string };
          if (p.name === "svc-tensor") {
            io.out(`${p.version}\n`);
            return 0;
          }
        } catch {
          /* keep walking up */
        }
      }
      throw new Error("The package.json of svc-tensor was not found.");
    }
    const run = COMMANDS[cmd];
    if (!run) throw new UsageError(`Unknown command ${shown(cmd)}.`);
    return await run(rest, io);
  } catch (e) {
    // a data command's refusal by the key or the namespace list gets its way out (one more call)
    if (DATA_COMMANDS.has(cmd ?? "") && e instanceof SvcError && (e.code === "forbidden" || e.code === "unauthorized")) {
      return reportError(await (await import("./hints.js")).withHint(e, io), io, hint);
    }
    return reportError(e, io, hint);
  }
}

const DATA_COMMANDS = new Set(["put", "get", "ls", "rm", "serve", "search", "topk", "import"]);

/** What a command that changes something leaves when it is interrupted. */
const LEFT_BY: Record<string, string> = {
  put: "the write under way may or may not have been stored",
  rm: "the delete under way may or may not have been done",
  import: "the files stored so far stay stored; the write under way may or may not have been",
  tenant: "the change under way may or may not have been made",
  key: "the change under way may or may not have been made",
  reload: "the gateways may or may not have reloaded",
  migrate: "the keys copied so far stay copied; run it again to go on",
  compact: "what it purged so far stays purged; the next run does the rest",
};

/**
 * The line `svc COMMAND` prints when interrupted (Ctrl-C, SIGTERM) before it exits 130 or 143;
 * null for the servers, which stop cleanly on those signals themselves, and for no command.
 */
export function interruptedLine(cmd: string | undefined): string | null {
  if (cmd === undefined || !COMMANDS[cmd] || cmd === "up" || cmd === "engine" || cmd === "gateway") return null;
  const left = LEFT_BY[cmd];
  return `svc ${cmd}: interrupted${left ? `; ${left}` : ""}.`;
}
