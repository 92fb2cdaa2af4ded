# Runs the Python verifiers' main() on many cases in one interpreter, for the comparison with
# the Node verifiers (verifiers.test.ts): standard input holds one JSON line per case,
# {"which": "receipt" | "bundle", "args": [...]}, and standard output gets one JSON line per
# case, {"code", "stdout", "stderr"}, as a process of its own would have given them. Run
# from python/ with `python3 -S`; a line "NUMPY LOADED" ends a case's stderr if numpy was
# imported. verifiers.test.ts also runs the modules as processes (python3 -m).
import io
import json
import sys

sys.path.insert(0, ".")
from svc_tensor import verify_bundle, verify_receipt  # noqa: E402

MAINS = {"receipt": verify_receipt.main, "bundle": verify_bundle.main}
out = sys.stdout
for line in sys.stdin.buffer.read().decode("utf-8", "surrogateescape").split("\n"):
    if not line:
        continue
    case = json.loads(line)
    streams = [io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="surrogateescape") for _ in range(2)]
    sys.stdout, sys.stderr = streams
    try:
        code = MAINS[case["which"]](case["args"])
    except SystemExit as e:  # the verifiers return their exit code; an exit is reported as one
        code = e.code if isinstance(e.code, int) else 1
    finally:
        for s in streams:
            s.flush()
        sys.stdout, sys.stderr = out, sys.__stderr__
    text = [s.buffer.getvalue().decode("utf-8", "replace") for s in streams]
    if "numpy" in sys.modules:
        text[1] += "NUMPY LOADED\n"
    out.write(json.dumps({"code": code, "stdout": text[0], "stderr": text[1]}) + "\n")
out.flush()
