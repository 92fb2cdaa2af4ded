// The Python verifiers' building blocks (python/tests/test_mldsa.py: NIST ML-DSA-65 vectors
// and malformed signatures; test_ijson.py: RFC 8785 and the strict reader) run with
// `python3 -S`, where no site-packages (so no numpy) can be imported, one tape assertion
// per Python test; and importing the package and both verifiers loads no numpy even where
// numpy is installed.
import test from "tape";
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PY_ROOT, findNumpyPython, findPython, requirePython, runPy, runPythonTests } from "./helpers.js";

test("python verifier unit tests without site-packages", async (t) => {
  const py = findPython();
  if (!requirePython(t, py, "python3 (3.11 or later)")) return;
  const probe = await runPy(py, ["-S", "-c", "import numpy"]);
  t.notEqual(probe.code, 0, "under -S numpy cannot be imported");
  await runPythonTests(t, py, ["-S"], ["tests.test_mldsa", "tests.test_ijson"]);
});

test("importing svc_tensor and the verifiers loads no numpy", async (t) => {
  const py = findNumpyPython() ?? findPython();
  if (!requirePython(t, py, "python3 (3.11 or later)")) return;
  const r = await runPy(py, [
    "-c",
    "import sys, svc_tensor, svc_tensor.verify_receipt, svc_tensor.verify_bundle; print(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy'))",
  ]);
  t.equal(r.code, 0, `imports succeed${r.stderr ? `: ${r.stderr.slice(-500)}` : ""}`);
  t.equal(r.stdout.trim(), "[]", "no numpy module was loaded");
});

test("pip installs python/ offline and gives both console scripts", async (t) => {
  const candidates = [findNumpyPython(), findPython(), "/usr/bin/python3"].filter((x): x is string => !!x);
  let py: string | null = null;
  for (const exe of [...new Set(candidates)]) {
    if ((await runPy(exe, ["-c", "import setuptools, wheel, pip"])).code === 0) {
      py = exe;
      break;
    }
  }
  if (!requirePython(t, py, "python3 with pip, setuptools and wheel (Debian: python3-pip python3-setuptools python3-wheel)")) return;
  const tmp = mkdtempSync(join(tmpdir(), "svc-py-install-"));
  try {
    // built from a copy, so that the build leaves nothing in the working tree
    cpSync(PY_ROOT, join(tmp, "src"), { recursive: true, filter: (s) => !/__pycache__|\.egg-info|\/build$/.test(s) });
    const r = await runPy(
      py,
      [
        "-m",
        "pip",
        "install",
        "--no-index",
        "--no-build-isolation",
        "--no-deps",
        "--disable-pip-version-check",
        "--target",
        join(tmp, "site"),
        join(tmp, "src"),
      ],
      { PIP_NO_INPUT: "1" },
    );
    t.equal(r.code, 0, `pip install --no-index --no-build-isolation succeeds offline${r.code ? `: ${r.stderr.slice(-800)}` : ""}`);
    for (const script of ["svc-verify-receipt-py", "svc-verify-bundle-py"]) {
      const s = await runPy(py, [join(tmp, "site", "bin", script), "--help"], { PYTHONPATH: join(tmp, "site") });
      t.equal(s.code, 0, `${script} --help exits 0`);
      t.match(s.stdout, /Exit codes: 0 valid/, `${script} prints its help`);
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
