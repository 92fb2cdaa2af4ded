// The I-JSON reader: what it accepts exactly as JSON.parse does, and the three problems it
// reports (a member name twice, a number that changes value in RFC 8785 form, a lone
// surrogate), with where they are.
import test from "tape";
import {
  JsonProblemError,
  JsonSyntaxError,
  JsonTooManyValuesError,
  MAX_JSON_VALUES,
  formatPath,
  numberProblem,
  parseIJson,
  readJson,
} from "../../server/http/json.js";
import { canonicalString } from "../../server/provenance/receipt.js";

test("agrees with JSON.parse on valid I-JSON, whitespace, escapes and nesting", (t) => {
  const docs = [
    '{"a":1,"b":[true,false,null],"c":{"d":"e"}}',
    ' \t\n\r{ "a" : [ 1 , 2 ] , "b" : { } , "c" : [ ] } \n',
    '"\\u00e9\\n\\t\\"\\\\\\/"',
    '{"s":"a\\\\\\"b\\\\","t":"\\ud83d\\ude00"}',
    "[-0,0.5,-1.25e-7,1E+3,123456789012345]",
    "[[[[[]]]],{}]",
    JSON.stringify({ list: Array.from({ length: 300 }, (_, i) => ({ i, f: i / 7, s: `x\u2028"${i}`, n: null })) }),
  ];
  for (const d of docs) {
    const r = readJson(d);
    t.equal(r.problem, null, `no problem: ${d.slice(0, 40)}`);
    t.deepEqual(r.value, JSON.parse(d), `same value: ${d.slice(0, 40)}`);
  }
  const deep = "[".repeat(90_000) + "]".repeat(90_000);
  t.ok(Array.isArray(readJson(deep).value), "90,000 levels deep: read without recursion");
  t.end();
});

test("text that is not JSON throws JsonSyntaxError", (t) => {
  for (const bad of [
    "",
    " ",
    "{",
    "[1,]",
    '{"a":1,}',
    "[1 2]",
    "01",
    "-",
    "1.",
    "1e",
    ".5",
    "+1",
    '"x',
    '"\t"',
    "nul",
    "tru",
    '{"a" 1}',
    "{a:1}",
    "[1]x",
    "'a'",
    "NaN",
    "Infinity",
  ]) {
    t.throws(() => readJson(bad), JsonSyntaxError, `refused: ${JSON.stringify(bad)}`);
  }
  t.end();
});

test("a member name twice in one object is reported at any depth, with its path", (t) => {
  const top = readJson('{"claims":{"forged":true},"schema":"x","claims":{}}');
  t.equal(top.problem?.kind, "duplicate_name");
  t.deepEqual(top.problem?.path, [], "in the top object");
  t.match(top.problem!.message, /"claims" appears twice/);
  const nested = readJson('{"a":[1,{"b":{"c":1,"d":2,"c":3}}]}');
  t.deepEqual(nested.problem?.path, ["a", 1, "b"], "path to the object holding the repeated name");
  t.equal(formatPath(nested.problem!.path), "a[1].b");
  t.equal(readJson('{"a":1,"A":2,"a ":3}').problem, null, "names that differ are not repeats");
  t.equal(readJson('[{"a":1},{"a":2}]').problem, null, "one name in two objects is not a repeat");
  t.throws(() => parseIJson('{"x":{"y":1,"y":1}}'), JsonProblemError, "parseIJson throws even for equal values");
  t.end();
});

test("__proto__ is an ordinary member: kept, enumerable, and canonicalised", (t) => {
  const r = readJson('{"__proto__":{"admin":true},"a":1}');
  const v = r.value as Record<string, unknown>;
  t.equal(r.problem, null);
  t.deepEqual(Object.keys(v), ["__proto__", "a"], "an own member");
  t.equal(Object.getPrototypeOf(v), Object.prototype, "the prototype is untouched");
  t.equal(({} as Record<string, unknown>).admin, undefined, "nothing polluted");
  t.equal(canonicalString(v), '{"__proto__":{"admin":true},"a":1}', "in the RFC 8785 form");
  t.equal(readJson('{"__proto__":1,"__proto__":2}').problem?.kind, "duplicate_name", "twice is a repeat like any name");
  t.end();
});

test("numbers: kept when their RFC 8785 form has the same decimal value, reported otherwise", (t) => {
  const kept: Array<[string, string]> = [
    ["9007199254740991", "9007199254740991"],
    ["9007199254740992", "9007199254740992"],
    ["1e21", "1e+21"],
    ["1E21", "1e+21"],
    ["100000000000000000000", "100000000000000000000"],
    ["0.1", "0.1"],
    ["1.0", "1"],
    ["100e-2", "1"],
    ["-0", "0"],
    ["0.30000000000000004", "0.30000000000000004"],
    ["5e-324", "5e-324"],
    ["1.7976931348623157e308", "1.7976931348623157e+308"],
  ];
  for (const [text, jcs] of kept) {
    const r = readJson(`[${text}]`);
    t.equal(r.problem, null, `${text}: kept`);
    t.equal(canonicalString(r.value), `[${jcs}]`, `${text}: signed as ${jcs}`);
  }
  const changed: Array<[string, RegExp]> = [
    ["9007199254740993", /would be signed as 9007199254740992/],
    ["18446744073709551615", /would be signed as 18446744073709552000/],
    ["12345678901234567890", /would be signed as 12345678901234567000/],
    ["0.1000000000000000000001", /would be signed as 0\.1;/],
    ["1e400", /beyond the range of a double/],
    ["-1e400", /beyond the range of a double/],
    ["1e-400", /would be signed as 0;/],
  ];
  for (const [text, re] of changed) {
    const r = readJson(`{"n":[${text}]}`);
    t.equal(r.problem?.kind, "inexact_number", `${text}: reported`);
    t.deepEqual(r.problem?.path, ["n", 0], `${text}: with its path`);
    t.match(r.problem!.message, re, `${text}: ${r.problem?.message}`);
    t.equal(numberProblem(text), r.problem!.message, `${text}: one sentence for the rule`);
  }
  t.end();
});

test("a lone surrogate is reported; a pair is not", (t) => {
  t.equal(readJson('["\\ud83d\\ude00"]').problem, null);
  const r = readJson('{"a":["x","\\ud800"]}');
  t.equal(r.problem?.kind, "lone_surrogate");
  t.deepEqual(r.problem?.path, ["a", 1]);
  t.equal(readJson('["\\udc00x"]').problem?.kind, "lone_surrogate");
  t.end();
});

test("random documents: no problem found in I-JSON, and a repeated name found where it was put", (t) => {
  let seed = 12345;
  const rnd = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const names = ["a", "b", 'q"uote', "back\\slash", "\u00e9", "\ud83d\ude00", "__proto__", "tab\t", "", "x y"];
  const ws = (): string => [" ", "", "\n  ", "\t", ""][rnd(5)]!;
  const str = (s: string): string => (rnd(3) === 0 ? JSON.stringify(s).replace(/[a-z]/, (c) => `\\u00${c.charCodeAt(0).toString(16)}`) : JSON.stringify(s));
  // writes a random value; the object whose number is `dupAt` gets one of its names twice
  let objects = 0;
  let dupPath: Array<string | number> | null = null;
  const write = (depth: number, path: Array<string | number>, dupAt: number): string => {
    const k = depth === 0 ? 6 : depth > 4 ? rnd(4) : rnd(7);
    if (k === 0) return String([0, -1, 1.5, 1e21, 123456789, -0.25, 9007199254740992][rnd(7)]);
    if (k === 1) return str(["", "x", "é\n", 'a"b', "\\", "\u2028"][rnd(6)]!);
    if (k === 2) return ["true", "false", "null"][rnd(3)]!;
    if (k === 3 || k === 4) {
      const n = rnd(4);
      const items = Array.from({ length: n }, (_, i) => ws() + write(depth + 1, [...path, i], dupAt) + ws());
      return `[${items.join(",")}]`;
    }
    const mine = objects++;
    const keys = [...new Set(Array.from({ length: 1 + rnd(5) }, () => names[rnd(names.length)]!))];
    const members = keys.map((key) => `${ws()}${str(key)}${ws()}:${ws()}${write(depth + 1, [...path, key], dupAt)}`);
    if (mine === dupAt) {
      members.push(`${str(keys[0]!)}:1`);
      dupPath = path;
    }
    return `{${members.join(",")}}`;
  };
  let checked = 0;
  for (let round = 0; round < 400; round++) {
    objects = 0;
    dupPath = null;
    const start = seed;
    const clean = write(0, [], -1);
    const r = readJson(clean);
    if (r.problem !== null || JSON.stringify(r.value) !== JSON.stringify(JSON.parse(clean))) {
      t.fail(`clean document reported: ${clean} ${JSON.stringify(r.problem)}`);
      return t.end();
    }
    if (objects === 0) continue;
    const target = rnd(objects);
    objects = 0;
    const saved = seed;
    seed = start; // the same document, with one name written twice in object number `target`
    const dirty = write(0, [], target);
    seed = saved;
    if (dupPath === null) continue;
    const d = readJson(dirty);
    if (d.problem?.kind !== "duplicate_name" || JSON.stringify(d.problem.path) !== JSON.stringify(dupPath)) {
      t.fail(`repeat not found at ${JSON.stringify(dupPath)}: ${dirty} ${JSON.stringify(d.problem)}`);
      return t.end();
    }
    checked++;
  }
  t.ok(checked > 100, `${checked} documents with a repeated name, each found at its path; 400 clean ones, none reported`);
  t.end();
});

test("more values than the limit are refused before any value is built", (t) => {
  t.equal(MAX_JSON_VALUES, 100_000);
  const within = `[${Array(MAX_JSON_VALUES).fill(0).join(",")}]`;
  t.ok(Array.isArray(readJson(within).value), "100,000 elements: read");
  for (const [name, text] of [
    [
      "elements",
      `[${Array(MAX_JSON_VALUES + 1)
        .fill(0)
        .join(",")}]`,
    ],
    ["members", `{${Array.from({ length: MAX_JSON_VALUES + 1 }, (_, i) => `"k${i}":0`).join(",")}}`],
    ["nesting", "[".repeat(MAX_JSON_VALUES + 1) + "]".repeat(MAX_JSON_VALUES + 1)],
    ["empty containers", `[${Array(MAX_JSON_VALUES).fill("{}").join(",")}]`],
  ] as const) {
    t.throws(() => readJson(text), JsonTooManyValuesError, `${name}: refused`);
  }
  t.throws(
    () =>
      readJson(
        `[${Array(MAX_JSON_VALUES + 1)
          .fill(0)
          .join(",")}`,
      ),
    JsonTooManyValuesError,
    "counted before the syntax is checked",
  );
  t.throws(() => readJson('{"a":"unterminated'), JsonSyntaxError, "an unterminated string is a syntax error");
  t.throws(() => readJson('["a\\"'), JsonSyntaxError, "so is one that ends in an escaped quote");
  t.end();
});
