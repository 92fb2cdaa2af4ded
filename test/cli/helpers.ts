// Runs `svc` in-process with captured standard output and error.
import { main } from "../../bin/cli/main.js";
import type { Io } from "../../bin/cli/common.js";

export interface Run {
  code: number;
  out: string;
  err: string;
}

export async function svc(argv: string[], env: NodeJS.ProcessEnv = {}, extra: Partial<Io> = {}): Promise<Run> {
  let out = "";
  let err = "";
  const io: Io = {
    out: (s) => {
      out += s;
    },
    err: (s) => {
      err += s;
    },
    env,
    errIsTTY: false,
    ...extra,
  };
  const code = await main(argv, io);
  return { code, out, err };
}
