// svc import and paths named .npy that are not plain files: a symbolic link to a file is read
// as that file (keyed by the link's name) and a link to nothing, a link to a directory and a
// FIFO are each reported as a failed file with what they are, never skipped unsaid (and the
// FIFO is never opened, which would wait forever). Against a real gateway and engine.
import test from "tape";
import { execFileSync } from "node:child_process";
import { mkdir, readFile, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { svc } from "./helpers.js";
import { startStack } from "./stack.js";
import { findNpyFiles } from "../../bin/cli/import.js";
import { readNpy, writeNpy } from "../../lib/npy.js";

test("svc import follows links to files and reports dangling links, links to directories and FIFOs as failed", async (t) => {
  const stack = await startStack();
  const env = { SVC_GATE_URL: stack.gateway, SVC_API_KEY: stack.apiKey };
  try {
    const src = join(stack.dir, "links");
    await mkdir(join(src, "sub"), { recursive: true });
    const a = Int16Array.from({ length: 12 }, (_, i) => i - 6);
    await writeFile(join(src, "a.npy"), writeNpy({ dtype: "int16", shape: [3, 4], data: a }));
    await symlink("a.npy", join(src, "b.npy"));
    await symlink("missing.npy", join(src, "dangling.npy"));
    await symlink("sub", join(src, "dir.npy"));
    let fifo = true;
    try {
      execFileSync("mkfifo", [join(src, "pipe.npy")]);
    } catch {
      fifo = false;
      t.comment("mkfifo is missing: the FIFO case is left out");
    }

    const found = await findNpyFiles(src);
    t.deepEqual(
      found.map((f) => [f.key, f.problem ?? "file"]),
      [
        ["a", "file"],
        ["b", "file"],
        ["dangling", "a symbolic link to nothing (its target does not exist)"],
        ["dir", "a symbolic link to a directory, not to a file"],
        ...(fifo ? [["pipe", "a FIFO, not a file"]] : []),
      ],
      "every path named .npy is listed, with what is wrong with those that are not files",
    );

    const r = await svc(["import", "ns", src], env);
    t.equal(r.code, 1, "exit 1: some failed");
    const total = fifo ? 5 : 4;
    t.match(r.out, new RegExp(`^Imported 2 of ${total} files`, "m"), `the file and the link to it are imported: ${r.out.split("\n")[0]}`);
    t.ok(r.out.includes(`${join(src, "dangling.npy")}: a symbolic link to nothing (its target does not exist).\n`), "the dangling link's reason");
    t.ok(r.out.includes(`${join(src, "dir.npy")}: a symbolic link to a directory, not to a file.\n`), "the directory link's reason");
    if (fifo) t.ok(r.out.includes(`${join(src, "pipe.npy")}: a FIFO, not a file.\n`), "the FIFO's reason");

    const out = join(stack.dir, "b.npy");
    t.equal((await svc(["serve", "ns", "b", "-o", out], env)).code, 0, "serve the linked entry");
    const b = readNpy(await readFile(out));
    t.deepEqual(
      [b.dtype, b.shape, Array.from(new Int16Array(b.data.buffer, b.data.byteOffset, 12))],
      ["int16", [3, 4], Array.from(a)],
      "the link's key holds the target's data",
    );
  } finally {
    await stack.close();
  }
});
