// The one strict JSON scanner under its two faces (server/http/json.ts): parseStrictJson for
// request bodies (float64 numbers by default, the RFC 8785 number rule on request, "__proto__"
// refused, depth bounded) and readJson for signed texts (RFC 8785 numbers, "__proto__" kept,
// values counted). The same texts through both, the option, and hostile texts that are not JSON.
import test from "tape";
import { ValidationError } from "../../lib/errors.js";
import { JsonSyntaxError, MAX_JSON_DEPTH, findJsonProblem, numberProblem, parseStrictJson, readJson, type NumberRule } from "../../server/http/json.js";

const refusal = (text: string, numbers?: NumberRule): string => {
  try {
    parseStrictJson(text, numbers ? { numbers } : {});
  } catch (e) {
    if (e instanceof ValidationError) return e.message;
    throw e;
  }
  return "accepted";
};

test("numbers: the RFC 8785 rule on request, the float64 rule by default", (t) => {
  const onlyRfc = ["9007199254740993", "18446744073709551615", "0.1000000000000000000001", "12345678901234567890"];
  for (const n of onlyRfc) {
    t.equal(refusal(`{"n":${n}}`), "accepted", `${n}: a float64 holds it`);
    t.equal(
      refusal(`{"x":{"n":[${n}]}}`, "rfc8785"),
      `The request body has the number ${n} in the member "n", which does not keep its exact value in its RFC 8785 form.`,
      `${n}: refused under rfc8785, naming the member`,
    );
  }
  for (const n of ["1e400", "-1e400", "1e-400"]) {
    t.match(refusal(`{"n":${n}}`), /which a float64 cannot hold\.$/, `${n}: refused under float64`);
    t.match(refusal(`{"n":${n}}`, "rfc8785"), /RFC 8785 form\.$/, `${n}: refused under rfc8785`);
  }
  for (const n of [
    "0",
    "-0",
    "1.0",
    "100e-2",
    "1e21",
    "1E21",
    "9007199254740992",
    "5e-324",
    "1.7976931348623157e308",
    "0.30000000000000004",
    "1" + "0".repeat(20),
  ]) {
    t.equal(refusal(`[${n}]`, "rfc8785"), "accepted", `${n}: kept under rfc8785`);
    t.equal(refusal(`[${n}]`), "accepted", `${n}: kept under float64`);
  }
  t.end();
});

test("numbers: parseStrictJson with rfc8785 refuses exactly what readJson reports", (t) => {
  let seed = 7;
  const rnd = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const digits = (k: number): string => Array.from({ length: k }, () => String(rnd(10))).join("");
  let refused = 0;
  for (let round = 0; round < 3000; round++) {
    const int = digits(1 + rnd(22)).replace(/^0+(?=\d)/, "");
    const frac = rnd(2) ? `.${digits(1 + rnd(20))}` : "";
    const exp = rnd(3) === 0 ? `e${["", "+", "-"][rnd(3)]}${rnd(400)}` : "";
    const n = `${rnd(2) ? "-" : ""}${int}${frac}${exp}`;
    const text = `{"a":[${n}]}`;
    const signed = readJson(text).problem;
    const m = refusal(text, "rfc8785");
    if ((signed === null) !== (m === "accepted") || (signed !== null && signed.message !== numberProblem(n))) {
      t.fail(`${n}: readJson ${JSON.stringify(signed)}, parseStrictJson ${m}`);
      return t.end();
    }
    if (signed) refused++;
  }
  t.ok(refused > 300, `3000 random numbers, the same verdict from both faces (${refused} refused)`);
  t.end();
});

test("the faces differ only where they should: __proto__ and depth", (t) => {
  t.match(refusal('{"__proto__":1}', "rfc8785"), /"__proto__", which is not accepted/, "a request body refuses __proto__ under either rule");
  t.equal(readJson('{"__proto__":1}').problem, null, "a signed text keeps it");
  const deep = (k: number): string => "[".repeat(k) + "]".repeat(k);
  t.match(refusal(deep(MAX_JSON_DEPTH + 1), "rfc8785"), /nested more than 64 levels/, "a request body is bounded in depth");
  t.equal(readJson(deep(1000)).problem, null, "a signed text is bounded by its count of values instead");
  const rules = { numbers: "float64", refuseProto: false, maxDepth: 3, maxValues: Infinity } as const;
  t.deepEqual(findJsonProblem('{"a":[{"b":[]}]}', rules)?.path, ["a", 0, "b"], "too_deep names the container one level too deep");
  t.equal(findJsonProblem('{"a":[{"b":1}]}', rules), null, "at the limit: fine");
  for (const text of ['{"a":1,"a":2}', '["\\ud800"]', '{"x":{"\\udfff":1}}']) {
    t.equal(findJsonProblem(text, rules)?.kind, readJson(text).problem?.kind, `one scanner: ${text}`);
  }
  t.end();
});

test("text that is not JSON: the scanner ends on every one, and readJson throws JsonSyntaxError", (t) => {
  const fixed = ['"', '["a\\"', '{"a":"\\', '{"a":"x\\\\\\"', "[".repeat(50_000), "]]]}}},,,", ",{", '{"a"', "-", "--1e", '"\\u', '{"a":"\\ud800', "\u0000"];
  for (const bad of fixed) {
    t.throws(() => readJson(bad), JsonSyntaxError, `readJson: ${JSON.stringify(bad.slice(0, 20))}`);
    t.match(refusal(bad), /not valid JSON/, `parseStrictJson: ${JSON.stringify(bad.slice(0, 20))}`);
  }
  // valid documents cut and spliced at random points: JSON.parse decides, the scanner only has to end
  let seed = 99;
  const rnd = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const base = JSON.stringify({ a: [1, 'x"y', { b: null, "c\\": [true, 1e21, -0.5] }], d: "\ud83d\ude00", e: {} });
  const alphabet = '{}[],:"\\ue0123-+.ntf ';
  let rounds = 0;
  for (; rounds < 2000; rounds++) {
    let s = base;
    for (let k = 0, m = 1 + rnd(4); k < m; k++) {
      const at = rnd(s.length + 1);
      s = rnd(2) ? s.slice(0, at) + alphabet[rnd(alphabet.length)] + s.slice(at) : s.slice(0, at) + s.slice(at + 1 + rnd(3));
    }
    let valid = true;
    try {
      JSON.parse(s);
    } catch {
      valid = false;
    }
    try {
      readJson(s);
      if (!valid) throw new Error("accepted");
    } catch (e) {
      if (valid || !(e instanceof JsonSyntaxError)) {
        t.fail(`${JSON.stringify(s)}: ${(e as Error).message}`);
        return t.end();
      }
    }
    try {
      findJsonProblem(s, { numbers: "rfc8785", refuseProto: true, maxDepth: 64, maxValues: 1000 });
    } catch {
      // anything thrown is fine on text that is not JSON; returning is what is checked
    }
  }
  t.equal(rounds, 2000, "2000 mangled documents: every scan ended, readJson agreed with JSON.parse on each");
  t.end();
});
