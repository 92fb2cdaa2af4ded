// The one query-string reader (server/http/query.ts) as a function: decoding, the limits and
// the refusals, and a prototype-less result.
import test from "tape";
import { ValidationError } from "../../lib/errors.js";
import { MAX_QUERY_PARAMS, parseQueryString, queryOf } from "../../server/http/query.js";

test("parseQueryString: decoding", (t) => {
  t.deepEqual(
    { ...parseQueryString("a=1&b=x+y&c=%2F%20%C3%A9&d&e=") },
    { a: "1", b: "x y", c: "/ é", d: "", e: "" },
    "+ is a space, percent-encoding is UTF-8, a bare name is empty",
  );
  t.deepEqual({ ...parseQueryString("&&a=1&&") }, { a: "1" }, "empty pieces skipped");
  t.deepEqual({ ...parseQueryString("a=b=c") }, { a: "b=c" }, "the first = splits");
  t.deepEqual({ ...parseQueryString(null) }, {}, "no query string");
  t.deepEqual({ ...queryOf("/v1/list/x?limit=3#frag") }, { limit: "3" }, "queryOf drops the fragment");
  const q = parseQueryString("__proto__=1&constructor=2&toString=3");
  t.equal(Object.getPrototypeOf(q), null, "no prototype");
  t.deepEqual(Object.keys(q), ["__proto__", "constructor", "toString"], "__proto__ and constructor are ordinary names, kept");
  t.end();
});

test("parseQueryString: refusals are one-sentence ValidationErrors", (t) => {
  const refused: [string, RegExp][] = [
    ["a=1&a=2", /^a must be given once in the query string\.$/],
    ["a=1&b=2&a", /a must be given once/],
    ["a=%zz", /not valid percent-encoded UTF-8/],
    ["a=%C3", /not valid percent-encoded UTF-8/],
    ["%ff=1", /not valid percent-encoded UTF-8/],
    ["=1", /without a name/],
    [Array.from({ length: MAX_QUERY_PARAMS + 1 }, (_, i) => `p${i}`).join("&"), /more than 32 parameters/],
    [Array.from({ length: 100_000 }, (_, i) => `p${i}=1`).join("&"), /more than 32 parameters/],
  ];
  for (const [q, re] of refused) {
    try {
      parseQueryString(q);
      t.fail(`accepted ${q.slice(0, 40)}`);
    } catch (e) {
      t.ok(e instanceof ValidationError && e.code === "bad_request" && re.test(e.message), `${q.slice(0, 40)} -> ${(e as Error).message}`);
    }
  }
  t.equal(
    Object.keys(parseQueryString(Array.from({ length: MAX_QUERY_PARAMS }, (_, i) => `p${i}`).join("&"))).length,
    MAX_QUERY_PARAMS,
    "exactly the limit is accepted",
  );
  t.end();
});
