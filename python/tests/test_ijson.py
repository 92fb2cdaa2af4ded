"""RFC 8785 canonical JSON and the strict I-JSON reader, on the cases RFC 8785 and the
appliance's tests name (numbers, escapes, member order) and on hostile text."""

from __future__ import annotations

import struct
import sys
import unittest

import random

from svc_tensor.ijson import (
    JsonSyntaxError, JsonTooManyValuesError, _read_exact, _read_fast, _Slow, canonical_string, ijson_problem, js_number,
    number_problem, read_json,
)


def f64(hex_bits: str) -> float:
    return struct.unpack(">d", bytes.fromhex(hex_bits))[0]


class Numbers(unittest.TestCase):
    def test_rfc8785_appendix_b_values(self) -> None:
        # RFC 8785, Appendix B: IEEE 754 bits and their ECMAScript form
        for bits, text in [
            ("0000000000000000", "0"), ("8000000000000000", "0"), ("0000000000000001", "5e-324"),
            ("8000000000000001", "-5e-324"), ("7fefffffffffffff", "1.7976931348623157e+308"),
            ("ffefffffffffffff", "-1.7976931348623157e+308"), ("4340000000000000", "9007199254740992"),
            ("c340000000000000", "-9007199254740992"), ("4430000000000000", "295147905179352830000"),
            ("44b52d02c7e14af5", "9.999999999999997e+22"), ("44b52d02c7e14af6", "1e+23"),
            ("44b52d02c7e14af7", "1.0000000000000001e+23"), ("444b1ae4d6e2ef4e", "999999999999999700000"),
            ("444b1ae4d6e2ef4f", "999999999999999900000"), ("444b1ae4d6e2ef50", "1e+21"),
            ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"), ("3eb0c6f7a0b5ed8d", "0.000001"),
            ("41b3de4355555553", "333333333.3333332"), ("41b3de4355555554", "333333333.33333325"),
            ("41b3de4355555555", "333333333.3333333"), ("41b3de4355555556", "333333333.3333334"),
            ("41b3de4355555557", "333333333.33333343"), ("becbf647612f3696", "-0.0000033333333333333333"),
            ("43143ff3c1cb0959", "1424953923781206.2"),
        ]:
            with self.subTest(bits=bits):
                self.assertEqual(js_number(f64(bits)), text)

    def test_number_problems(self) -> None:
        self.assertIsNone(number_problem("1.0"))
        self.assertIsNone(number_problem("1E21"))
        self.assertIsNone(number_problem("-0"))
        self.assertIsNone(number_problem("0.1e1"))
        self.assertIn("would be signed as 9007199254740992", number_problem("9007199254740993") or "")
        self.assertIn("beyond the range of a double", number_problem("1e400") or "")
        self.assertIn("would be signed as 0.1", number_problem("0.10000000000000000001") or "")


class Canonical(unittest.TestCase):
    def test_member_order_is_by_utf16_code_units(self) -> None:
        v = {"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
             "1": "One", "\U0001f600": "Emoji: Grinning Face", "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}
        # RFC 8785 section 3.2.3's example order
        self.assertEqual(canonical_string(v), '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis",'
                         '"\u20ac":"Euro Sign","\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}')

    def test_escapes_as_json_stringify_writes_them(self) -> None:
        self.assertEqual(canonical_string(["\u0000\u0001\u001f\"\\/\b\f\n\r\t\u007f\u2028é😀"]),
                         '["\\u0000\\u0001\\u001f\\"\\\\/\\b\\f\\n\\r\\t\u007f\u2028é😀"]')

    def test_values_that_are_not_ijson_are_refused(self) -> None:
        for bad in ({"x": float("inf")}, ["\ud800"], {"\udc00": 1}, {"a": object()}):
            with self.subTest(bad=repr(bad)):
                with self.assertRaises(ValueError):
                    canonical_string(bad)
        deep: list = []
        cur = deep
        for _ in range(70):
            nxt: list = []
            cur.append(nxt)
            cur = nxt
        self.assertEqual(ijson_problem(deep), "nested too deeply")


class Reading(unittest.TestCase):
    def test_first_problem_in_text_order_with_its_path(self) -> None:
        v, p = read_json('{"a":[1,{"b":"\\ud800"}],"a":9007199254740993}')
        self.assertEqual(v, {"a": 9007199254740992.0})
        self.assertEqual((p.kind, p.path), ("lone_surrogate", ["a", 1, "b"]))
        _, p = read_json('{"x":{"k":1,"k":2}}')
        self.assertEqual((p.kind, p.path), ("duplicate_name", ["x"]))
        _, p = read_json('[0,1e400]')
        self.assertEqual((p.kind, p.path), ("inexact_number", [1]))
        self.assertEqual(read_json('{"\\ud83d\\ude00":"\\u00e9"}'), ({"\U0001f600": "é"}, None))

    def test_text_that_is_not_json(self) -> None:
        for bad in ["", "{", "[1,]", '{"a" 1}', "01", "1.", ".5", "+1", "NaN", "Infinity", "'x'", '"\x01"', '"\\x41"', "[1] 2",
                    "tru", "nul", '{"a":1,}', "\ufeff{}", '{"a":1 "b":2}', "[" * 10]:
            with self.subTest(text=bad):
                with self.assertRaises(JsonSyntaxError):
                    read_json(bad)

    def test_hostile_sizes(self) -> None:
        with self.assertRaises(JsonTooManyValuesError):
            read_json("[" + "0," * 100_001 + "0]")
        deep = "[" * 50_000 + "]" * 50_000
        v, p = read_json(deep)  # no recursion: nesting cannot exhaust the stack
        self.assertIsNone(p)
        self.assertIsInstance(v, list)


class FastAndExact(unittest.TestCase):
    def test_the_fast_reading_accepts_only_what_the_exact_reader_finds_no_problem_in(self) -> None:
        rng = random.Random(5)
        atoms = ["0", "-0", "1.0", "1E21", "1e400", "9007199254740993", "0.1", "0.10000000000000000001", "5e-324", "2e-324",
                 '"x"', '"\\ud800"', '"\\ud83d\\ude00"', "true", "null", "123456789012345678", "-1.7976931348623157e308",
                 '"a\\"b"', "[]", "{}", "NaN", "01", "1.", '"\x01"']

        def gen(d: int) -> str:
            r = rng.random()
            if d > 3 or r < 0.4:
                return rng.choice(atoms)
            if r < 0.7:
                return "[" + ",".join(gen(d + 1) for _ in range(rng.randrange(4))) + "]"
            keys = [rng.choice(['"a"', '"b"', '"a"', '"\\u0061"', '"\\ud800"', '""']) for _ in range(rng.randrange(4))]
            return "{" + ",".join(f"{k}:{gen(d + 1)}" for k in keys) + "}"

        fast_n = 0
        for _ in range(4000):
            text = gen(0)
            try:
                fast = _read_fast(text, 100_000)
            except _Slow:
                continue
            fast_n += 1
            value, problem = _read_exact(text, 100_000)
            self.assertIsNone(problem, text)
            self.assertEqual(repr(value), repr(fast), text)
        self.assertGreater(fast_n, 1000)


if __name__ == "__main__":
    sys.exit(unittest.main())
