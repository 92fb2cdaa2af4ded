// Every refusal of a hostile value is one sentence in the product's words, naming the field:
// "shape.0 must be at most 2147483647.", never zod's own English ("Too big: expected number to
// be <=2147483647", "Invalid input: expected string, received array").
import test from "tape";
import { createStore } from "../../lib/store/index.js";
import { ValidationError } from "../../lib/errors.js";
import * as tt from "../../lib/tt.js";
import * as pred from "../../lib/pred.js";
import { parseOrThrow, validationErrorFrom } from "../../lib/fields.js";
import { z } from "zod";

/** zod's own English: none of it may reach a sentence. */
export const ZOD_PHRASES = /Invalid input|Invalid option|expected|received|Too big|Too small|<=|>=/;

/** One sentence: one line, a full stop at its end and nowhere else before a capital letter. */
export const oneSentence = (s: string): boolean => /^[^\n]+\.$/.test(s) && !/\.\s+[A-Z]/.test(s);

type Case = [what: string, field: string, exact: string | RegExp | null, call: () => unknown];

test("hostile values through the library: one product sentence naming the field", async (t) => {
  const s = await createStore({ path: ":memory:" });
  const d = new Float32Array(64).fill(1);
  await s.put("ns", "k", d, { shape: [8, 8] });
  const cases: Case[] = [
    ["version 2**60", "version", "version must be at most 9007199254740991.", () => s.get("ns", "k", { version: 2 ** 60 })],
    ["version 1.5", "version", "version must be an integer.", () => s.get("ns", "k", { version: 1.5 })],
    ["version NaN", "version", "version must be a number, not NaN.", () => s.get("ns", "k", { version: NaN })],
    ["version a string", "version", "version must be a number.", () => s.get("ns", "k", { version: "1" as never })],
    ["if_version -1", "if_version", /^if_version must be at least 0\.$/, () => s.put("ns", "x", d, { shape: [64], if_version: -1 })],
    ["shape entry 2^31", "shape.0", "shape.0 must be at most 2147483647.", () => s.put("ns", "x", d, { shape: [2 ** 31] })],
    ["shape entry 2^60", "shape.0", "shape.0 must be at most 2147483647.", () => s.put("ns", "x", d, { shape: [2 ** 60] })],
    ["shape entry NaN", "shape.0", "shape.0 must be a number, not NaN.", () => s.put("ns", "x", d, { shape: [NaN] })],
    ["shape a string", "shape", "shape must be a list.", () => s.put("ns", "x", d, { shape: "64" as never })],
    [
      "slice start -1",
      "slice.0.0",
      "slice.0.0 must be at least 0.",
      () =>
        s.serve("ns", "k", {
          slice: [
            [-1, 2],
            [0, 1],
          ],
        }),
    ],
    [
      "slice stop 2^60",
      "slice.0.1",
      "slice.0.1 must be at most 9007199254740991.",
      () =>
        s.serve("ns", "k", {
          slice: [
            [0, 2 ** 60],
            [0, 1],
          ],
        }),
    ],
    [
      "slice stop 1.5",
      "slice.0.1",
      "slice.0.1 must be an integer.",
      () =>
        s.serve("ns", "k", {
          slice: [
            [0, 1.5],
            [0, 1],
          ],
        }),
    ],
    [
      "slice start a string",
      "slice.0.0",
      "slice.0.0 must be a number.",
      () =>
        s.serve("ns", "k", {
          slice: [
            ["0", 1],
            [0, 1],
          ] as never,
        }),
    ],
    ["slice pair of one", "slice.0", "slice.0 must have at least 2 entries.", () => s.serve("ns", "k", { slice: [[0], [0, 1]] as never })],
    [
      "slice pair of three",
      "slice.0",
      "slice.0 must have at most 2 entries.",
      () =>
        s.serve("ns", "k", {
          slice: [
            [0, 1, 2],
            [0, 1],
          ] as never,
        }),
    ],
    ["k NaN", "k", "k must be a number, not NaN.", () => s.query.topk("ns", { key: "k", k: NaN })],
    ["k Infinity", "k", "k must be a finite number.", () => s.query.topk("ns", { key: "k", k: Infinity })],
    ["k 2^60", "k", "k must be at most 1000.", () => s.query.topk("ns", { key: "k", k: 2 ** 60 })],
    ["k true", "k", "k must be a number.", () => s.query.topk("ns", { key: "k", k: true as never })],
    ["unknown metric", "metric", "metric must be one of cosine, dot, l2.", () => s.query.topk("ns", { key: "k", metric: "cos" as never })],
    ["metric of similarity", "metric", "metric must be one of cosine, dot, l2.", () => s.query.similarity("ns", "k", "k", { metric: 1 as never })],
    ["include_self a string", "include_self", "include_self must be true or false.", () => s.query.topk("ns", { key: "k", include_self: "yes" as never })],
    ["vector with NaN", "vector", "vector.0 must be a number, not NaN.", () => s.query.vector("ns", { vector: [NaN], k: 1 })],
    ["vector a string", "vector", "vector must be a list.", () => s.query.vector("ns", { vector: "x" as never, k: 1 })],
    ["vector with a string", "vector", "vector.1 must be a number.", () => s.query.vector("ns", { vector: [1, "a"] as never, k: 1 })],
    ["list limit 2^60", "limit", "limit must be at most 1000.", () => s.list("ns", { limit: 2 ** 60 })],
    ["list offset 2^60", "offset", /^offset /, () => s.list("ns", { offset: 2 ** 60 })],
    ["list prefix a number", "prefix", "prefix must be a string.", () => s.list("ns", { prefix: 5 as never })],
    ["tolerance NaN", "tolerance", "tolerance must be a finite number.", () => s.put("ns", "x", d, { shape: [64], tolerance: NaN })],
    [
      "max_abs_error a string",
      "max_abs_error",
      "max_abs_error must be a finite number.",
      () => s.put("ns", "x", d, { shape: [64], max_abs_error: "1" as never }),
    ],
    ["max_rank 2^60", "max_rank", "max_rank must be at most 1024.", () => s.put("ns", "x", d, { shape: [64], max_rank: 2 ** 60 })],
    ["metadata a list", "metadata", "metadata must be an object.", () => s.put("ns", "x", d, { shape: [64], metadata: [1] as never })],
    ["options a number", "options", /^options must be an object\.$/, () => s.get("ns", "k", 5 as never)],
    ["tt.compress shape 2^31", "shape.0", "shape.0 must be at most 2147483647.", () => tt.compress(new Float32Array(4), [2 ** 31, 1])],
    ["tt.compress tolerance NaN", "tolerance", "tolerance must be a finite number.", () => tt.compress(new Float32Array(4), [4], { tolerance: NaN })],
    ["tt.compress max_rank 2^60", "max_rank", /^max_rank must be at most \d+\.$/, () => tt.compress(new Float32Array(4), [4], { max_rank: 2 ** 60 })],
    [
      "pred.compress shape 2^31",
      "shape.0",
      "shape.0 must be at most 2147483647.",
      () => pred.compress(new Float32Array(4), { shape: [2 ** 31], tolerance: 0.1 }),
    ],
    ["pred.compress shape NaN", "shape.0", "shape.0 must be a number, not NaN.", () => pred.compress(new Float32Array(4), { shape: [NaN], tolerance: 0.1 })],
  ];
  try {
    for (const [what, field, exact, call] of cases) {
      try {
        await call();
        t.fail(`${what}: accepted`);
        continue;
      } catch (e) {
        const m = (e as Error).message;
        t.ok(e instanceof ValidationError, `${what}: ValidationError`);
        t.ok(oneSentence(m), `${what}: one sentence: ${m}`);
        t.ok(m.includes(field), `${what}: names ${field}`);
        t.notOk(ZOD_PHRASES.test(m), `${what}: no zod wording`);
        if (typeof exact === "string") t.equal(m, exact, `${what}: the sentence`);
        else if (exact) t.match(m, exact, `${what}: the sentence`);
      }
    }
  } finally {
    await s.close();
  }
});

test("every kind of zod issue, in the one place that words them", (t) => {
  const sentence = (schema: z.ZodType, v: unknown, what?: string) => {
    try {
      parseOrThrow(schema, v, what);
      return "accepted";
    } catch (e) {
      return (e as Error).message;
    }
  };
  const o = (shape: z.ZodRawShape) => z.strictObject(shape);
  const rows: [string, z.ZodType, unknown, string][] = [
    ["too_big number", o({ n: z.number().max(5) }), { n: 6 }, "n must be at most 5."],
    ["too_big exclusive", o({ n: z.number().lt(5) }), { n: 5 }, "n must be less than 5."],
    ["too_small exclusive", o({ n: z.number().gt(0) }), { n: 0 }, "n must be greater than 0."],
    ["too_small int", o({ n: z.number().int().min(0) }), { n: -1 }, "n must be at least 0."],
    ["int beyond 2^53", o({ n: z.number().int() }), { n: 2 ** 60 }, "n must be at most 9007199254740991."],
    ["int beyond 2^53, own message", o({ n: z.number().int("n must be an integer") }), { n: -(2 ** 60) }, "n must be at least -9007199254740991."],
    ["string too long", o({ s: z.string().max(3) }), { s: "abcd" }, "s must have at most 3 characters."],
    ["string empty", o({ s: z.string().min(1) }), { s: "" }, "s must not be empty."],
    ["list too long", o({ a: z.array(z.number()).max(1) }), { a: [1, 2] }, "a must have at most 1 entry."],
    ["list exact", o({ a: z.array(z.number()).length(2) }), { a: [1] }, "a must have exactly 2 entries."],
    ["bigint", o({ b: z.bigint().max(3n) }), { b: 5n }, "b must be at most 3."],
    ["required", o({ s: z.string() }), {}, "s is required."],
    ["a string, not a number", o({ s: z.string() }), { s: 5 }, "s must be a string."],
    ["an object, not a list", o({ m: o({}) }), { m: [] }, "m must be an object."],
    ["NaN", o({ n: z.number() }), { n: NaN }, "n must be a number, not NaN."],
    ["null", o({ n: z.number() }), { n: null }, "n must be a number, not null."],
    ["-Infinity", o({ n: z.number() }), { n: -Infinity }, "n must be a finite number."],
    ["enum", o({ e: z.enum(["a", "b"]) }), { e: "c" }, "e must be one of a, b."],
    ["literal", o({ e: z.literal("a") }), { e: "c" }, "e must be a."],
    ["regex", o({ s: z.string().regex(/^x$/) }), { s: "y" }, "s must match the pattern /^x$/."],
    ["email", o({ s: z.email() }), { s: "y" }, "s must be an email address."],
    ["starts_with", o({ s: z.string().startsWith("a") }), { s: "b" }, 's must start with "a".'],
    ["multiple_of", o({ n: z.number().multipleOf(2) }), { n: 3 }, "n must be a multiple of 2."],
    ["union of types", o({ u: z.union([z.string(), z.number()]) }), { u: true }, "u must be a string or a number."],
    ["record key", o({ r: z.record(z.string().max(1), z.number()) }), { r: { bb: 1 } }, "r.bb is not an allowed key."],
    ["unknown field", o({}), { x: 1 }, "unknown field 'x'."],
    ["the value as a whole", z.number().max(1), 2, "The value must be at most 1."],
    ["the value, named by the caller", z.number().max(1), 2, "count must be at most 1."],
    ["a schema's own sentence stands", o({ n: z.number().max(1, "n must be at most one") }), { n: 2 }, "n must be at most one."],
    ["a list in a JSON body", o({ s: z.string() }), { s: ["a", "b"] }, "s must be a string."],
    ["a repeated query parameter", o({ limit: z.string() }), Object.assign(Object.create(null), { limit: ["1", "2"] }), "limit must be given once."],
  ];
  for (const [what, schema, v, want] of rows) {
    const m = sentence(schema, v, what === "the value, named by the caller" ? "count" : undefined);
    t.equal(m, want, what);
    t.ok(oneSentence(m) && !ZOD_PHRASES.test(m), `${what}: one sentence, no zod wording`);
  }
  // a ZodError from elsewhere (toSvcError) gets the same words
  const r = z.strictObject({ k: z.number().max(1000) }).safeParse({ k: 2000 });
  t.equal(validationErrorFrom(r.error!).message, "k must be at most 1000.", "validationErrorFrom of a plain safeParse");
  t.end();
});
