"""I-JSON (RFC 7493) reading and RFC 8785 (JCS) canonical JSON, standard library only.

The reader behaves as the appliance's (JSON.parse plus a scan for I-JSON problems): every
number is an IEEE 754 double (a Python float), a member name twice keeps the later value,
and the first problem in text order is reported instead of hidden: a repeated member name,
a number whose RFC 8785 form has another decimal value, a lone surrogate. Text goes
through the json module's C scanner first; any doubt (a problem, an escaped surrogate, deep
nesting, too many values, not JSON) sends it to an exact reader that never recurses, so that
hostile nesting cannot exhaust the stack and the first problem is named with its path.
"""

from __future__ import annotations

import json
import math
import re

MAX_JSON_VALUES = 100_000

NUMBER_RULE = (
    "a number must keep its exact decimal value in its RFC 8785 form "
    "(the shortest ECMAScript form of the nearest double)"
)

# ECMAScript's WhiteSpace and LineTerminator: what String.prototype.trim and \s take
JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
JS_WS_CLASS = "[" + re.escape(JS_WHITESPACE) + "]"

_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonSyntaxError(ValueError):
    """The text is not JSON."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"not valid JSON (at character {offset})")
        self.offset = offset


class JsonTooManyValuesError(ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit:,} JSON values")
        self.limit = limit


class JsonProblem:
    """kind: duplicate_name, inexact_number or lone_surrogate; path: member names and array
    indexes from the top; message: one clause, no capital, no full stop."""

    __slots__ = ("kind", "path", "message")

    def __init__(self, kind: str, path: list, message: str) -> None:
        self.kind, self.path, self.message = kind, path, message

    def __repr__(self) -> str:
        return f"JsonProblem({self.kind!r}, {self.path!r}, {self.message!r})"


class JsonProblemError(ValueError):
    def __init__(self, problem: JsonProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


# ---- UTF-16 helpers: ECMAScript strings count and order by UTF-16 code units ----------

def utf16_len(s: str) -> int:
    return len(s) + sum(1 for ch in s if ord(ch) > 0xFFFF)


def code_point_len(s: str) -> int:
    """The length zod gives a string's max and min checks: Unicode code points, a surrogate
    pair one and a lone surrogate one (Python holds a pair read from JSON as one character)."""
    n = len(s)
    for i in range(n - 1):
        if 0xD800 <= ord(s[i]) <= 0xDBFF and 0xDC00 <= ord(s[i + 1]) <= 0xDFFF:
            n -= 1
    return n


def utf16_slice(s: str, end: int, start: int = 0) -> str:
    """s.slice(start, end) as ECMAScript does it (may leave a lone surrogate)."""
    if all(ord(ch) <= 0xFFFF for ch in s):
        return s[start:end]
    units = s.encode("utf-16-le", "surrogatepass")[2 * start: 2 * end]
    return units.decode("utf-16-le", "surrogatepass")


def utf16_key(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def quote(s: str) -> str:
    """JSON.stringify of at most 80 UTF-16 units of s (an ellipsis when cut)."""
    t = utf16_slice(s, 80) + "…" if utf16_len(s) > 80 else s
    return js_string(t)


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\\ud800-\udfff]')


def js_string(s: str) -> str:
    """JSON.stringify of a string: the escapes of ECMAScript (lone surrogates as \\uXXXX)."""
    def rep(m: re.Match) -> str:
        ch = m.group(0)
        return _ESCAPES.get(ch) or f"\\u{ord(ch):04x}"
    return '"' + _NEEDS_ESCAPE.sub(rep, s) + '"'


# ---- numbers ---------------------------------------------------------------------------

def js_number(x: float) -> str:
    """Number.prototype.toString of a finite double (ECMA-262 Number::toString, radix 10)."""
    if x == 0:
        return "0"
    if x < 0:
        return "-" + js_number(-x)
    # repr gives the shortest digits that round-trip, the nearest such when there are several
    mantissa, _, exp_text = repr(float(x)).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    all_digits = (int_part + frac_part).lstrip("0")
    s = all_digits.rstrip("0")
    # value = s * 10^e2; ECMAScript's n is where the decimal point falls after s's first digit
    e2 = (int(exp_text) if exp_text else 0) - len(frac_part) + (len(all_digits) - len(s))
    k = len(s)
    n = k + e2
    if k <= n <= 21:
        return s + "0" * (n - k)
    if 0 < n <= 21:
        return s[:n] + "." + s[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + s
    e = n - 1
    sign = "+" if e >= 0 else "-"
    if k == 1:
        return f"{s}e{sign}{abs(e)}"
    return f"{s[0]}.{s[1:]}e{sign}{abs(e)}"


_NUM_PARTS = re.compile(r"(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?")


def _decimal_key(text: str) -> str:
    m = _NUM_PARTS.fullmatch(text)
    if not m:
        return text
    frac = m.group(3) or ""
    digits = (m.group(2) + frac).lstrip("0")
    if digits == "":
        return "0"
    exp_text = (m.group(4) or "0").lstrip("+")
    negative = exp_text.startswith("-")
    exp_digits = exp_text.lstrip("-").lstrip("0") or "0"
    # An exponent of more digits than the text is long puts the value at 0 or past every double
    # whatever its digits (such text never equals a double's canonical form); int() of it would
    # also meet Python's limit on the digits of an integer.
    if len(exp_digits) > 20:
        return text
    exp = (-int(exp_digits) if negative else int(exp_digits)) - len(frac)
    stripped = digits.rstrip("0")
    exp += len(digits) - len(stripped)
    return f"{m.group(1)}{stripped}e{exp}"


_PLAIN_INT = re.compile(r"-?\d+")


def number_problem(text: str) -> str | None:
    """Why a JSON number text changes value in RFC 8785 form, or None."""
    n = float(text)
    if not math.isfinite(n):
        return f"the number {quote(text)} is beyond the range of a double, so RFC 8785 cannot write it"
    if len(text) <= 15 and _PLAIN_INT.fullmatch(text):
        return None
    if repr(n) == text:  # the shortest digits of the double: RFC 8785 writes the same value
        return None
    canonical = js_number(n)
    if _decimal_key(text) == _decimal_key(canonical):
        return None
    return f"the number {quote(text)} would be signed as {canonical}; {NUMBER_RULE}"


# ---- reading ---------------------------------------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*"')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_IDENT = re.compile(r"[a-z]+")
_LITERALS = {"true": True, "false": False, "null": None}
_IDENT_CHARS = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def format_path(path: list) -> str:
    if not path:
        return "the top level"
    segs = path[:4] + ["\u2026"] + path[-3:] if len(path) > 8 else path
    out = ""
    for s in segs:
        if isinstance(s, int):
            out += f"[{s}]"
        elif s == "\u2026":
            out += ".\u2026"
        else:
            out += (f".{s}" if out else s) if _IDENT_CHARS.match(s) else f"[{quote(s)}]"
    return out


def problem_sentence(what: str, p: JsonProblem) -> str:
    return f"{what} is not I-JSON (RFC 8785 needs it): at {format_path(p.path)}, {p.message}."


class _Slow(Exception):
    """The fast reading cannot decide: the exact reader takes over."""


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_ANY_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def _fast_number(t: str) -> float:
    f = float(t)
    # text that is the shortest form of its double keeps its value (the common case)
    if repr(f) != t and not (len(t) <= 15 and _PLAIN_INT.fullmatch(t)) and number_problem(t) is not None:
        raise _Slow
    return f


def _fast_object(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Slow
    return d


def _no_constant(_t: str) -> float:
    raise _Slow


def _read_fast(text: str, max_values: int) -> object:
    """The value of text that has no I-JSON problem, read by the json module's C scanner;
    _Slow when the text may hold a problem, too many values or deep nesting, or is not
    JSON, so that the exact reader finds and places it."""
    if _ESCAPED_SURROGATE.search(text):
        raise _Slow
    bare = _ANY_STRING.sub("", text)
    if bare.count("{") + bare.count("[") + bare.count(",") > max_values:
        raise _Slow
    try:
        return json.loads(text, object_pairs_hook=_fast_object, parse_float=_fast_number,
                          parse_int=_fast_number, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise _Slow from None


def read_json(text: str, max_values: int = MAX_JSON_VALUES) -> tuple[object, JsonProblem | None]:
    """The value of JSON text and its first I-JSON problem (or None). JsonSyntaxError for
    text that is not JSON, JsonTooManyValuesError past `max_values` values (containers and
    the elements or members after the first, as the appliance counts them)."""
    try:
        return _read_fast(text, max_values), None
    except _Slow:
        return _read_exact(text, max_values)


def _read_exact(text: str, max_values: int) -> tuple[object, JsonProblem | None]:
    """read_json one token at a time, without recursion: the first problem in text order."""
    n = len(text)
    values = 0
    problem: JsonProblem | None = None
    # stack entries: [container, is_array, key, path_segment_count]
    stack: list[list] = []
    path: list = []

    def skip(i: int) -> int:
        return _WS.match(text, i).end()

    def read_string(i: int) -> tuple[str, int, bool]:
        m = _STRING.match(text, i)
        if not m:
            raise JsonSyntaxError(i)
        raw = m.group(0)
        if "\\" not in raw:
            return raw[1:-1], m.end(), False
        return json.loads(raw), m.end(), True

    def count() -> None:
        nonlocal values
        values += 1
        if values > max_values:
            raise JsonTooManyValuesError(max_values)

    i = skip(0)
    result: object = None
    have_result = False
    # the loop reads one value at i, then attaches it and reads the separator
    while True:
        if i >= n:
            raise JsonSyntaxError(i)
        c = text[i]
        value: object
        if c == "{" or c == "[":
            count()
            is_array = c == "["
            container: object = [] if is_array else {}
            i = skip(i + 1)
            if i < n and text[i] == ("]" if is_array else "}"):
                value = container
                i += 1
            else:
                stack.append([container, is_array, None])
                if is_array:
                    path.append(0)
                    continue
                if i >= n or text[i] != '"':
                    raise JsonSyntaxError(i)
                key, i, esc = read_string(i)
                if problem is None and esc and _SURROGATE.search(key):
                    problem = JsonProblem("lone_surrogate", list(path), "a string holds a lone surrogate, which has no UTF-8 form")
                stack[-1][2] = key
                path.append(key)
                i = skip(i)
                if i >= n or text[i] != ":":
                    raise JsonSyntaxError(i)
                i = skip(i + 1)
                continue
        elif c == '"':
            value, i, esc = read_string(i)
            if problem is None and esc and _SURROGATE.search(value):
                problem = JsonProblem("lone_surrogate", list(path), "a string holds a lone surrogate, which has no UTF-8 form")
        elif c == "-" or "0" <= c <= "9":
            m = _NUMBER.match(text, i)
            if not m:
                raise JsonSyntaxError(i)
            t = m.group(0)
            value = float(t)
            i = m.end()
            if problem is None and not (len(t) <= 15 and _PLAIN_INT.fullmatch(t)):
                why = number_problem(t)
                if why:
                    problem = JsonProblem("inexact_number", list(path), why)
        else:
            m = _IDENT.match(text, i)
            if not m or m.group(0) not in _LITERALS:
                raise JsonSyntaxError(i)
            value = _LITERALS[m.group(0)]
            i = m.end()
        # attach the value and read what follows it, closing containers as they end
        while True:
            if not stack:
                result, have_result = value, True
                break
            top = stack[-1]
            i = skip(i)
            if top[1]:
                top[0].append(value)
            else:
                top[0][top[2]] = value
            if i < n and text[i] == ",":
                count()
                i = skip(i + 1)
                if top[1]:
                    path[-1] += 1
                    value = None
                    break
                if i >= n or text[i] != '"':
                    raise JsonSyntaxError(i)
                key, i, esc = read_string(i)
                path.pop()
                if problem is None and esc and _SURROGATE.search(key):
                    problem = JsonProblem("lone_surrogate", list(path), "a string holds a lone surrogate, which has no UTF-8 form")
                if problem is None and key in top[0]:
                    problem = JsonProblem("duplicate_name", list(path), f"the member name {quote(key)} appears twice in one object")
                top[2] = key
                path.append(key)
                i = skip(i)
                if i >= n or text[i] != ":":
                    raise JsonSyntaxError(i)
                i = skip(i + 1)
                break
            if i < n and text[i] == ("]" if top[1] else "}"):
                i += 1
                stack.pop()
                path.pop()
                value = top[0]
                continue
            raise JsonSyntaxError(i)
        if have_result:
            break
    i = skip(i)
    if i != n:
        raise JsonSyntaxError(i)
    return result, problem


def parse_strict(text: str) -> object:
    value, problem = read_json(text)
    if problem:
        raise JsonProblemError(problem)
    return value


# ---- values ----------------------------------------------------------------------------

def _well_formed(s: str) -> bool:
    return _SURROGATE.search(s) is None


def ijson_problem(v: object, depth: int = 0) -> str | None:
    """Why a value is not I-JSON, as the appliance's iJsonProblem says it (depth 64 at most)."""
    if depth > 64:
        return "nested too deeply"
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, float):
        return None if math.isfinite(v) else "a number is not finite"
    if isinstance(v, int):
        return None
    if isinstance(v, str):
        return None if _well_formed(v) else "a string holds a lone surrogate"
    if isinstance(v, list):
        for x in v:
            p = ijson_problem(x, depth + 1)
            if p:
                return p
        return None
    if isinstance(v, dict):
        for k, x in _js_entries(v):
            if not _well_formed(k):
                return "a member name holds a lone surrogate"
            p = ijson_problem(x, depth + 1)
            if p:
                return p
        return None
    return "a value is not JSON"


_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")


def _array_index(k: str) -> bool:
    """Whether JavaScript orders the member name k as an array index (0 to 2^32 - 2)."""
    return len(k) <= 10 and _ARRAY_INDEX.fullmatch(k) is not None and int(k) < 2**32 - 1


def _js_entries(d: dict) -> list:
    """Object.entries order: integer-like names ascending first, then insertion order."""
    idx = [k for k in d if _array_index(k)]
    if not idx:
        return list(d.items())
    idx.sort(key=int)
    rest = [k for k in d if not _array_index(k)]
    return [(k, d[k]) for k in idx + rest]


def canonical_string(v: object) -> str:
    """RFC 8785 text of an I-JSON value; ValueError when it is not I-JSON."""
    problem = ijson_problem(v)
    if problem:
        raise ValueError(problem)
    return _json_text(v, True)


def js_stringify(v: object) -> str:
    """JSON.stringify of a parsed JSON value: members in Object.entries order."""
    return _json_text(v, False)


def _json_text(v: object, sort_members: bool) -> str:
    """JSON.stringify of v, with every object's members in UTF-16 order when `sort_members`
    (RFC 8785 for an I-JSON value), else in Object.entries order; a number that is not finite
    is written null and a lone surrogate escaped, as JSON.stringify writes them. Iterative, so
    that no nesting depth meets Python's recursion limit."""
    out: list[str] = []
    # explicit stack: ("v", value) writes a value, ("s", text) writes text
    work: list[tuple[str, object]] = [("v", v)]
    while work:
        kind, x = work.pop()
        if kind == "s":
            out.append(x)  # type: ignore[arg-type]
        elif x is None:
            out.append("null")
        elif x is True:
            out.append("true")
        elif x is False:
            out.append("false")
        elif isinstance(x, (int, float)):
            out.append("null" if isinstance(x, float) and not math.isfinite(x) else js_number(float(x)))
        elif isinstance(x, str):
            out.append(js_string(x))
        elif isinstance(x, list):
            items: list[tuple[str, object]] = [("s", "[")]
            for j, e in enumerate(x):
                if j:
                    items.append(("s", ","))
                items.append(("v", e))
            items.append(("s", "]"))
            work.extend(reversed(items))
        elif isinstance(x, dict):
            items = [("s", "{")]
            members = [(k, x[k]) for k in sorted(x, key=utf16_key)] if sort_members else _js_entries(x)
            for j, (k, e) in enumerate(members):
                if j:
                    items.append(("s", ","))
                items.append(("s", js_string(k) + ":"))
                items.append(("v", e))
            items.append(("s", "}"))
            work.extend(reversed(items))
        else:
            raise ValueError("a value is not JSON")
    return "".join(out)


def canonical_bytes(v: object) -> bytes:
    return canonical_string(v).encode("utf-8")


def stringify_len(v: object) -> int:
    """Bytes of JSON.stringify(v) in UTF-8 (member order does not change the length)."""
    return len(_json_text(v, False).encode("utf-8"))
