"""Time of the Python offline verifiers: one receipt and one bundle, as a whole process
(interpreter start, imports, reading, the checks) and the checks alone in-process. Every
run's verdict is checked to be valid and printed beside the time.

Usage: python3 python/bench/verify.py RECEIPT.json BUNDLE.zip PUBLIC-KEY [RUNS]
(test/python/verifiers.test.ts makes such files; any genuine receipt, bundle and key do.)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from svc_tensor.bundle import read_zip, verify_bundle  # noqa: E402
from svc_tensor.cli import read_public_key_file, read_receipt_file  # noqa: E402
from svc_tensor.receipt import verify_receipt  # noqa: E402


def _ms(xs: list[float]) -> str:
    return f"min {min(xs) * 1e3:.0f} ms, median {statistics.median(xs) * 1e3:.0f} ms"


def main(receipt: str, bundle: str, key: str, runs: int = 5) -> int:
    env = {**os.environ, "PYTHONPATH": ROOT}
    print(f"python {sys.version.split()[0]} ({sys.executable}), load average {os.getloadavg()[0]:.2f}")
    for module, args in (("verify_receipt", ["--receipt", receipt]), ("verify_bundle", ["--bundle", bundle])):
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", f"svc_tensor.{module}", *args, "--public-key", key],
                               capture_output=True, text=True, env=env, check=False)
            times.append(time.perf_counter() - t0)
            if p.returncode != 0 or not p.stdout.startswith("verdict: valid"):
                print(f"{module}: not valid (exit {p.returncode}): {p.stdout[:200]}{p.stderr[:200]}")
                return 1
        print(f"{module} as a process: {_ms(times)} over {runs} runs, every verdict valid")
    keys = read_public_key_file(key)
    value, problem = read_receipt_file(receipt)
    with open(bundle, "rb") as f:
        data = f.read()
    for name, fn in (
        ("receipt checks", lambda: verify_receipt(value, keys, [k.fingerprint for k in keys], None, problem)),
        ("bundle read and checks", lambda: verify_bundle(read_zip(data), keys, None, False, None)),
    ):
        times = []
        for _ in range(runs * 2):
            t0 = time.perf_counter()
            r = fn()
            times.append(time.perf_counter() - t0)
            if r["verdict"] != "valid":
                print(f"{name}: verdict {r['verdict']}")
                return 1
        print(f"{name} in-process: {_ms(times)} over {runs * 2} runs, every verdict valid")
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:4], *(int(x) for x in sys.argv[4:5])))
