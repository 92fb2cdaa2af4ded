"""Runs unittest modules and prints one JSON line per test (test, outcome, detail), for the
tape wrappers in test/python/. Exit status 0 when nothing failed.

Usage: python3 tests/run.py tests.test_mldsa [tests.test_ijson ...]
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Result(unittest.TestResult):
    def _emit(self, test, outcome: str, detail: str = "") -> None:
        print(json.dumps({"test": test.id(), "outcome": outcome, "detail": detail[-3000:]}), flush=True)

    def addSuccess(self, test):  # noqa: N802 - unittest's names
        super().addSuccess(test)
        self._emit(test, "pass")

    def addFailure(self, test, err):  # noqa: N802
        super().addFailure(test, err)
        self._emit(test, "fail", "".join(traceback.format_exception(*err)))

    def addError(self, test, err):  # noqa: N802
        super().addError(test, err)
        self._emit(test, "error", "".join(traceback.format_exception(*err)))

    def addSkip(self, test, reason):  # noqa: N802
        super().addSkip(test, reason)
        self._emit(test, "skip", reason)

    def addSubTest(self, test, subtest, err):  # noqa: N802
        super().addSubTest(test, subtest, err)
        if err is not None:
            outcome = "fail" if issubclass(err[0], test.failureException) else "error"
            self._emit(subtest, outcome, "".join(traceback.format_exception(*err)))


def main(names: list[str]) -> int:
    suite = unittest.defaultTestLoader.loadTestsFromNames(names)
    result = _Result()
    suite.run(result)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
