// The Python verifiers' building blocks (python/tests/test_mldsa.py: NIST ML-DSA-65 vectors
// and malformed signatures; test_ijson.py: RFC 8785 and the strict reader) run with
// `python3 -S`, where no site-packages (so no numpy) can be imported, one tape assertion
// per Python test; and importing the package and both verifiers loads no numpy even where
// numpy is installed.
import test from "tape";
import { findNumpyPython, findPython, requirePython, runPy, runPythonTests } from "./helpers.js";

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
  const r = await runPy(py, ["-c", "import sys, svc_tensor, svc_tensor.verify_receipt, svc_tensor.verify_bundle; print(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy'))"]);
  t.equal(r.code, 0, `imports succeed${r.stderr ? `: ${r.stderr.slice(-500)}` : ""}`);
  t.equal(r.stdout.trim(), "[]", "no numpy module was loaded");
});
