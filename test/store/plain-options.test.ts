// The options of get, serve and serveGpu, and the serve body of the engine: the plain ones the
// engine passes on every request ({} and { version }; namespace, key, version, device) are taken
// without their schema (lib/schemas.ts plainVersionOptions, plainServeBody); everything else
// still goes through it and gets its sentence. The quick checks agree with the schemas on every
// body of a generated set: same output where they take one, and nothing they take is refused.
import test from "tape";
import { createStore } from "../../lib/store/index.js";
import { ValidationError } from "../../lib/errors.js";
import { getOptionsSchema, plainServeBody, plainVersionOptions, serveBodySchema } from "../../lib/schemas.js";

test("get options: plain ones read the right version, the others are refused by name", async (t) => {
  const s = await createStore({ path: ":memory:" });
  const d = new Float32Array(16).fill(1);
  await s.put("ns", "k", d, { shape: [16] });
  await s.put("ns", "k", d, { shape: [16] });
  t.equal((await s.get("ns", "k")).version, 2, "no options: the latest version");
  t.equal((await s.get("ns", "k", {})).version, 2, "{}: the latest version");
  t.equal((await s.get("ns", "k", { version: 1 })).version, 1, "{ version: 1 }");
  t.equal((await s.get("ns", "k", { version: undefined })).version, 2, "{ version: undefined }: the latest version");
  t.equal((await s.get("ns", "k", Object.create(null) as object)).version, 2, "an object without a prototype: the latest version");
  const refused: [string, unknown, RegExp][] = [
    ["version 0", { version: 0 }, /^version must be at least 1\.$/],
    ["version -1", { version: -1 }, /^version must be at least 1\.$/],
    ["version 2**53", { version: 2 ** 53 }, /^version must be at most 9007199254740991\.$/],
    ["version 1.5", { version: 1.5 }, /^version must be an integer\.$/],
    ["version Infinity", { version: Infinity }, /version/],
    ["version a string", { version: "1" }, /^version must be a number\.$/],
    ["version and another member", { version: 1, slice: [] }, /slice/],
    ["another member only", { limit: 1 }, /limit/],
    ["a list", [], /options/],
    ["null", null, /options/],
    ["a number", 1, /options/],
  ];
  for (const [what, opts, re] of refused) {
    const err = await s.get("ns", "k", opts as never).then(
      () => null,
      (e: unknown) => e,
    );
    t.ok(err instanceof ValidationError && re.test(err.message), `${what}: refused (${err instanceof Error ? err.message : String(err)})`);
  }
  // a getter is read once: the version checked is the version read
  let reads = 0;
  const sly = {
    get version() {
      reads++;
      return reads === 1 ? 1 : 0;
    },
  };
  t.equal((await s.get("ns", "k", sly)).version, 1, "a version behind a getter: the value read once is used");
  await s.close();
});

test("serve options: plain ones read the right version, the others are refused by name", async (t) => {
  const s = await createStore({ path: ":memory:" });
  await s.put("ns", "k", new Float32Array(16).fill(1), { shape: [16] });
  await s.put("ns", "k", new Float32Array(16).fill(2), { shape: [16] });
  t.equal((await s.serve("ns", "k", {})).data[0], 2, "{}: the latest version");
  t.equal((await s.serve("ns", "k", { version: 1 })).data[0], 1, "{ version: 1 }");
  t.equal((await s.serve("ns", "k", { version: 1, slice: [[2, 4]] })).data.length, 2, "a slice still applies");
  for (const [what, opts, re] of [
    ["version 0", { version: 0 }, /^version must be at least 1\.$/],
    ["version 1.5", { version: 1.5 }, /^version must be an integer\.$/],
    ["an unknown member", { versions: 1 }, /versions/],
    ["null", null, /options/],
  ] as [string, unknown, RegExp][]) {
    const err = await s.serve("ns", "k", opts as never).then(
      () => null,
      (e: unknown) => e,
    );
    t.ok(err instanceof ValidationError && re.test(err.message), `${what}: refused (${err instanceof Error ? err.message : String(err)})`);
  }
  await s.close();
});

test("plainVersionOptions and plainServeBody agree with their schemas", (t) => {
  const names: unknown[] = ["ns", "a-b_C9", "", "a b", "x".repeat(255), "x".repeat(256), 7, null, undefined, ["ns"], "__proto__"];
  const keys: unknown[] = ["k", "a/b.c:d@e=f", "", "a//b", "a/./b", "..", "k".repeat(512), "k".repeat(513), "k\n", 1, undefined, {}];
  const versions: unknown[] = [undefined, 1, 2, 0, -1, 1.5, 2 ** 53, 2 ** 53 - 1, NaN, Infinity, "1", null, 1n];
  const devices: unknown[] = [undefined, "cpu", "gpu", "GPU", "", null, 1];
  const extras: [string, unknown][] = [
    ["slice", [[0, 1]]],
    ["dtype", "float32"],
    ["dtype", "int8"],
    ["other", 1],
    ["__proto__", 1],
  ];
  let taken = 0;
  let wrong = 0;
  let extraTaken = 0;
  const compare = (body: unknown, what: string) => {
    const quick = plainServeBody(body);
    const full = serveBodySchema.safeParse(body);
    if (quick === null) return;
    taken++;
    if (!full.success || JSON.stringify(quick) !== JSON.stringify(full.data)) {
      wrong++;
      if (wrong <= 5) t.fail(`${what}: quick ${JSON.stringify(quick)}, schema ${full.success ? JSON.stringify(full.data) : full.error.message}`);
    }
  };
  for (const namespace of names)
    for (const key of keys)
      for (const version of versions)
        for (const device of devices) {
          const body: Record<string, unknown> = { namespace, key };
          if (version !== undefined) body.version = version;
          if (device !== undefined) body.device = device;
          compare(body, `${String(namespace)}/${String(key)} v${String(version)} ${String(device)}`);
          compare({ ...body, version, device }, "with members set to undefined");
          for (const [name, value] of extras) {
            const more = { ...body };
            Object.defineProperty(more, name, { value, enumerable: true, configurable: true, writable: true });
            compare(more, `with ${name}`);
            if (plainServeBody(more) !== null) extraTaken++;
          }
        }
  t.ok(taken > 100, `the quick check took ${taken} bodies`);
  t.equal(wrong, 0, "every body it took is the schema's output");
  t.equal(extraTaken, 0, "no body with a slice, a dtype or another member is taken");
  for (const body of [null, [], "ns", 1, new Map(), new (class Body {})(), Object.assign(Object.create({ namespace: "ns" }), { key: "k" })])
    t.equal(plainServeBody(body), null, `${Object.prototype.toString.call(body)} goes through the schema`);
  for (const version of versions) {
    const opts = version === undefined ? {} : { version };
    const quick = plainVersionOptions(opts);
    const full = getOptionsSchema.safeParse(opts);
    if (quick !== null) t.ok(full.success && JSON.stringify(quick) === JSON.stringify(full.data), `{ version: ${String(version)} }: the schema's output`);
    else t.pass(`{ version: ${String(version)} }: goes through the schema`);
  }
  t.end();
});
