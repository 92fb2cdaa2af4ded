// readNpy against numpy itself: arrays saved by np.save in Fortran order (np.asfortranarray),
// of several dtypes (big-endian included) and shapes, read in C order with the bytes numpy's
// np.ascontiguousarray gives (little-endian). Skipped without a Python 3.11 with numpy, except
// in CI, where .ci/run installs them.
import test from "tape";
import { mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readNpy } from "../../lib/npy.js";
import { findNumpyPython, requirePython, runPy } from "./helpers.js";

const py = findNumpyPython();

const SCRIPT = `
import sys, numpy as np
out = sys.argv[1]
rng = np.random.default_rng(7)
for dt in ['<f4', '<f8', '>f8', '<f2', '<i2', '>i4', '|u1', '<u8', '|b1']:
    for shape in [(3, 4), (2, 3, 4), (5, 1, 3), (2, 3, 4, 5), (64, 33)]:
        a = (rng.standard_normal(shape) * 100).astype(dt)
        name = dt.replace('<', 'le').replace('>', 'be').replace('|', '') + '_' + 'x'.join(map(str, shape))
        np.save(f'{out}/f_{name}.npy', np.asfortranarray(a))
        np.save(f'{out}/c_{name}.npy', np.ascontiguousarray(a).astype(a.dtype.newbyteorder('<')))
`;

test("npy: Fortran-ordered files written by numpy read as numpy's C-order bytes", async (t) => {
  if (!requirePython(t, py, "python3 (3.11 or later) with numpy")) return;
  const dir = await mkdtemp(join(tmpdir(), "svc-npy-f-"));
  try {
    const r = await runPy(py!, ["-c", SCRIPT, dir]);
    t.equal(r.code, 0, `numpy wrote the files${r.code === 0 ? "" : `: ${r.stderr.slice(-500)}`}`);
    const names = (await readdir(dir)).filter((n) => n.startsWith("f_")).sort();
    t.equal(names.length, 45, "45 arrays");
    for (const n of names) {
      const f = await readFile(join(dir, n));
      t.ok(f.includes(Buffer.from("'fortran_order': True")), `${n}: numpy wrote it in Fortran order`);
      const got = readNpy(f);
      const want = readNpy(await readFile(join(dir, `c_${n.slice(2)}`)));
      t.deepEqual([got.dtype, got.shape], [want.dtype, want.shape], `${n}: dtype and shape`);
      t.ok(got.data.equals(want.data), `${n}: the bytes of np.ascontiguousarray`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
