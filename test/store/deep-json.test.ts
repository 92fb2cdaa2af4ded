// A filter or metadata nested so deeply that JSON.stringify runs out of stack is refused with
// a sentence saying so, not as "no cycles, no BigInt" (which it has neither of); cycles and
// BigInts keep their sentence.
import test from "tape";
import { createStore } from "../../lib/store/index.js";
import { ValidationError } from "../../lib/errors.js";

function nested(levels: number, wrap: (inner: unknown) => unknown): unknown {
  let v: unknown = 5;
  for (let i = 0; i < levels; i++) v = wrap(v);
  return v;
}

test("deeply nested filters and metadata: a sentence that says so", async (t) => {
  const s = await createStore({ path: ":memory:" });
  const refused = async (what: string, field: string, re: RegExp, p: () => Promise<unknown>) => {
    try {
      await p();
      t.fail(`${what}: accepted`);
    } catch (e) {
      t.ok(e instanceof ValidationError && re.test((e as Error).message), `${what}: ${(e as Error).message}`);
      t.equal((e as ValidationError).field, field, `${what}: names ${field}`);
    }
  };
  try {
    await s.put("ns", "k", new Float32Array(16).fill(1), { shape: [16] });
    const deepNot = nested(100_000, (f) => ({ $not: f })) as Record<string, unknown>;
    const deepObject = nested(100_000, (f) => ({ x: f })) as Record<string, unknown>;
    const deepValue = { n: { $eq: nested(100_000, (v) => [v]) } };
    const deep = /^filter is nested too deeply to be read as JSON\.$/;
    await refused("search, $not 100,000 deep", "filter", deep, () => s.search("ns", deepNot));
    await refused("search, an object 100,000 deep", "filter", deep, () => s.search("ns", deepObject));
    await refused("top-K, an $eq value 100,000 deep", "filter", deep, () => s.query.topk("ns", { key: "k", filter: deepValue }));
    await refused("metadata 100,000 deep", "metadata", /^metadata is nested too deeply to be read as JSON\.$/, () =>
      s.put("ns", "m", new Float32Array(16), { shape: [16], metadata: deepObject }),
    );
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    await refused("a cyclic filter", "filter", /no cycles, no BigInt/, () => s.search("ns", cyclic));
    await refused("cyclic metadata", "metadata", /no cycles, no BigInt/, () => s.put("ns", "m", new Float32Array(16), { shape: [16], metadata: cyclic }));
  } finally {
    await s.close();
  }
});
