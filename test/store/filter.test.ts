// The metadata filter language of docs/api.md (data plane): each operator, the combinators,
// dotted paths, number-vs-string comparisons (false, not an error) and rejected filters.
// Store-only: the filter compiler as a function; the language through search() runs on
// every target, createClient included, in store.test.ts.
import test from "tape";
import { compileFilter, matchFilter } from "../../lib/filter.js";
import { ValidationError } from "../../lib/errors.js";

const meta = { kind: "scan", run: { seed: 7, tag: "alpha-1" }, score: 0.5, tags: ["a", "b"], flag: false, none: null };
const m = (f: Record<string, unknown>) => matchFilter(compileFilter(f), meta);

test("filter: equality on fields and dotted paths", (t) => {
  t.equal(m({ kind: "scan" }), true, "string equality");
  t.equal(m({ kind: "other" }), false, "string inequality");
  t.equal(m({ "run.seed": 7 }), true, "dotted path");
  t.equal(m({ "run.seed": "7" }), false, "number vs string is not equal");
  t.equal(m({ tags: ["a", "b"] }), true, "array equality");
  t.equal(m({ run: { tag: "alpha-1", seed: 7 } }), true, "object equality ignores key order");
  t.equal(m({ none: null }), true, "null equality");
  t.equal(m({ missing: null }), false, "a missing field is not null");
  t.equal(m({}), true, "the empty filter matches everything");
  t.equal(m({ kind: "scan", "run.seed": 8 }), false, "all conditions must hold");
  t.end();
});

test("filter: comparison operators, numbers and strings never compare", (t) => {
  t.equal(m({ "run.seed": { $gt: 6 } }), true, "$gt");
  t.equal(m({ "run.seed": { $gt: 7 } }), false, "$gt strict");
  t.equal(m({ "run.seed": { $gte: 7 } }), true, "$gte");
  t.equal(m({ "run.seed": { $lt: 7 } }), false, "$lt strict");
  t.equal(m({ "run.seed": { $lte: 7, $gte: 7 } }), true, "two operators on one field");
  t.equal(m({ kind: { $gt: "a" } }), true, "string $gt");
  t.equal(m({ "run.seed": { $gt: "1" } }), false, "number vs string $gt is false");
  t.equal(m({ kind: { $lt: 100 } }), false, "string vs number $lt is false");
  t.equal(m({ missing: { $lt: 100 } }), false, "a missing field compares false");
  t.end();
});

test("filter: $eq $ne $in $nin $exists $prefix", (t) => {
  t.equal(m({ score: { $eq: 0.5 } }), true, "$eq");
  t.equal(m({ score: { $ne: 0.5 } }), false, "$ne on equal");
  t.equal(m({ missing: { $ne: 1 } }), true, "$ne on a missing field");
  t.equal(m({ kind: { $in: ["x", "scan"] } }), true, "$in");
  t.equal(m({ kind: { $in: [] } }), false, "$in empty list");
  t.equal(m({ kind: { $nin: ["x", "scan"] } }), false, "$nin");
  t.equal(m({ missing: { $nin: ["x"] } }), true, "$nin on a missing field");
  t.equal(m({ flag: { $exists: true } }), true, "$exists on a false value");
  t.equal(m({ missing: { $exists: false } }), true, "$exists false");
  t.equal(m({ "run.tag": { $prefix: "alpha" } }), true, "$prefix");
  t.equal(m({ "run.seed": { $prefix: "7" } }), false, "$prefix on a number is false");
  t.end();
});

test("filter: $and $or $not", (t) => {
  t.equal(m({ $and: [{ kind: "scan" }, { "run.seed": 7 }] }), true, "$and");
  t.equal(m({ $or: [{ kind: "x" }, { "run.seed": 7 }] }), true, "$or");
  t.equal(m({ $or: [{ kind: "x" }, { "run.seed": 8 }] }), false, "$or none");
  t.equal(m({ $not: { kind: "scan" } }), false, "$not");
  t.equal(m({ $not: { $or: [{ kind: "x" }, { flag: true }] } }), true, "nested combinators");
  t.end();
});

test("filter: bad filters are ValidationErrors naming the place", (t) => {
  const bad: [unknown, RegExp][] = [
    [{ kind: { $regex: "x" } }, /filter\.kind\.\$regex: unknown operator/],
    [{ $where: "1" }, /unknown operator '\$where'/],
    [{ $and: [] }, /filter\.\$and must be a non-empty list/],
    [{ $or: {} }, /filter\.\$or must be a non-empty list/],
    [{ $not: 3 }, /filter\.\$not must be a JSON object/],
    [{ a: { $in: 3 } }, /\$in takes a list/],
    [{ a: { $exists: "yes" } }, /\$exists takes true or false/],
    [{ a: { $gt: null } }, /\$gt takes a number or a string/],
    [{ a: { $prefix: 1 } }, /\$prefix takes a string/],
    [{ a: { $eq: 1, b: 2 } }, /mixes operators and plain fields/],
    [{ "a..b": 1 }, /non-empty dotted paths/],
    [[1, 2], /filter must be a JSON object/],
    [null, /filter must be a JSON object/],
  ];
  for (const [f, re] of bad) {
    try {
      compileFilter(f);
      t.fail(`accepted ${JSON.stringify(f)}`);
    } catch (e) {
      t.ok(e instanceof ValidationError && e.code === "bad_request" && re.test(e.message), `${JSON.stringify(f)} -> ${(e as Error).message}`);
    }
  }
  let deep: Record<string, unknown> = { a: 1 };
  for (let i = 0; i < 40; i++) deep = { $not: deep };
  t.throws(() => compileFilter(deep), /nested more than/, "deeply nested filters are refused, not a stack overflow");
  t.end();
});

test("filter: $in/$nin compiled to sets keep JSON equality (types apart, objects by structure)", (t) => {
  const f = compileFilter({ v: { $in: [1, "x", null, true, { b: 1, a: [2] }, [1, "1"], -0] } });
  const cases: [unknown, boolean][] = [
    [1, true],
    ["1", false],
    [1.0, true],
    [0, true],
    ["x", true],
    ["X", false],
    [null, true],
    [true, true],
    [false, false],
    [{ a: [2], b: 1 }, true],
    [{ a: [2] }, false],
    [[1, "1"], true],
    [["1", 1], false],
    [[1], false],
  ];
  for (const [v, want] of cases) t.equal(matchFilter(f, { v }), want, `$in ${JSON.stringify(v)} -> ${want}`);
  t.equal(matchFilter(f, {}), false, "$in on a missing field is false");
  const n = compileFilter({ v: { $nin: ["a", 2, false] } });
  t.deepEqual(
    [["a"], [2], [false], ["b"], [0], [true]].map(([v]) => matchFilter(n, { v })),
    [false, false, false, true, true, true],
    "$nin",
  );
  t.equal(matchFilter(n, {}), true, "$nin on a missing field is true");
  t.end();
});

test("filter: size limits are ValidationErrors naming the limit", (t) => {
  const refused: [unknown, RegExp][] = [
    [{ a: { $in: Array.from({ length: 1001 }, (_, i) => i) } }, /filter\.a\.\$in has 1001 values; the limit is 1000/],
    [Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`f${i}`, i])), /filter has 101 members; the limit is 100 per object/],
    [{ $or: [Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`f${i}`, i]))] }, /filter\.\$or\.0 has 101 members/],
    [{ $and: Array.from({ length: 101 }, () => ({ a: 1 })) }, /filter\.\$and has 101 filters; the limit is 100/],
    [{ a: { $in: ["x".repeat(70_000)] } }, /filter is \d+ bytes of JSON; the limit is 65536 bytes/],
    [{ $or: Array.from({ length: 3 }, () => ({ a: { $in: Array.from({ length: 400 }, (_, i) => i) } })) }, /more than 1000 conditions/],
  ];
  for (const [f, re] of refused) {
    try {
      compileFilter(f);
      t.fail("accepted");
    } catch (e) {
      t.ok(e instanceof ValidationError && re.test(e.message), (e as Error).message);
    }
  }
  t.doesNotThrow(() => compileFilter({ $or: [{ a: { $in: Array.from({ length: 990 }, (_, i) => i) } }, { b: 1 }] }), "990 values and a few conditions fit");
  t.end();
});
