// Strict JSON (server/http/json.ts): duplicate member names at any depth, "__proto__" members,
// invalid UTF-8 and deep nesting are refused with one sentence; valid texts parse as JSON.parse
// does. Then the same over real HTTP against the engine: JSON bodies, X-SVC-Metadata and the
// library's metadata.
import test from "tape";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ValidationError } from "../../lib/errors.js";
import { parseStrictJson, MAX_JSON_DEPTH } from "../../server/http/json.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine } from "../../server/engine/server.js";
import { createStore } from "../../lib/store/index.js";
import { distIsCurrent } from "../dist.js";

// The module the servers run: the compiled one when dist/ is current (as after npm ci), where the
// optimising compiler once made the scan quadratic; compiled by tsx the same source was not.
const compiledJson = distIsCurrent("dist/server/http/json.js");
const json = (
  compiledJson ? await import("../../dist/server/http/json.js" as string) : await import("../../server/http/json.js")
) as typeof import("../../server/http/json.js");

const refusal = (text: string | Uint8Array): string => {
  try {
    parseStrictJson(text);
  } catch (e) {
    if (e instanceof ValidationError) return e.message;
    throw e;
  }
  return "accepted";
};

test("parseStrictJson: valid texts parse as JSON.parse does", (t) => {
  const texts = [
    '{"a":1,"b":[1,2,{"a":1}],"c":{"a":{"a":null}}}',
    '[{"x":1},{"x":2}]',
    '"just a string with \\" and \\\\"',
    '{"a\\"b":1,"a\\\\":2,"a":{"a\\"b":3}}',
    '{"k":"}{][,\\"","l":"\\\\","m":"\\\\\\""}',
    '  { "sp" : [ ] , "x" : { } }  ',
    "123",
    '{"a":"' + "A".repeat(200_000) + '","b":1}',
  ];
  for (const s of texts) t.deepEqual(parseStrictJson(s), JSON.parse(s), `same value: ${s.slice(0, 40)}`);
  t.deepEqual(parseStrictJson(Buffer.from('{"é":"ü"}')), { é: "ü" }, "UTF-8 bytes decoded");
  t.end();
});

test("parseStrictJson: duplicate member names refused at any depth", (t) => {
  const cases: [string, RegExp][] = [
    ['{"a":1,"a":2}', /names the member "a" twice in one object/],
    ['{"x":{"y":[{"z":1,"q":{"k":1,"k":1}}]}}', /"k" twice/],
    ['[1,{"a":1,"b":2,"a":3}]', /"a" twice/],
    ['{"a":1,"\\u0061":2}', /"a" twice/], // names are compared after unescaping
    ['{"a\\"":1,"a\\"":2}', /twice/],
    ['{"":1,"":2}', /"" twice/],
    ['{"s":"{\\"a\\":1,\\"a\\":2}","a":{"a":{"a":1}},"a":0}', /"a" twice/],
  ];
  for (const [text, re] of cases) {
    const m = refusal(text);
    t.match(m, re, `refused: ${text}`);
    t.equal(m.split(". ").length, 1, "one sentence");
  }
  t.equal(refusal('{"a":{"b":1},"b":{"a":1},"c":[{"a":1},{"a":1}]}'), "accepted", "the same name in sibling objects is fine");
  t.equal(refusal('{"s":"{\\"a\\":1,\\"a\\":2}"}'), "accepted", "duplicates inside a string value are only text");
  t.end();
});

test("parseStrictJson: __proto__, UTF-8, depth, syntax", (t) => {
  t.match(refusal('{"__proto__":{"admin":true}}'), /member named "__proto__", which is not accepted/, "__proto__ at the top");
  t.match(refusal('{"a":[{"b":{"__proto__":1}}]}'), /"__proto__"/, "__proto__ nested");
  t.match(refusal('{"\\u005f_proto__":1}'), /"__proto__"/, "escaped __proto__");
  t.equal(refusal('{"a":"__proto__","__proto":1,"proto__":2}'), "accepted", "as a value or a near name it is data");
  t.match(refusal(Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d])), /not valid UTF-8/, "invalid UTF-8");
  t.match(refusal("[".repeat(MAX_JSON_DEPTH + 1) + "]".repeat(MAX_JSON_DEPTH + 1)), /nested more than 64 levels/, "too deep");
  t.equal(refusal("[".repeat(MAX_JSON_DEPTH) + "]".repeat(MAX_JSON_DEPTH)), "accepted", "at the depth limit");
  t.match(refusal("[".repeat(200_000)), /not valid JSON/, "unterminated deep text");
  for (const bad of ['{"a":1,}', "{'a':1}", '{"a":1}x', "", "NaN", '{"a":01}']) t.match(refusal(bad), /not valid JSON/, `syntax: ${JSON.stringify(bad)}`);
  t.throws(
    () => parseStrictJson('{"a":1,"a":1}', { what: "X-SVC-Metadata", field: "X-SVC-Metadata" }),
    /^ValidationError: X-SVC-Metadata names/,
    "what names the text",
  );
  t.end();
});

test("parseStrictJson: a long base64 string costs a linear scan", (t) => {
  const big = '{"namespace":"n","key":"k","data_b64":"' + "QUJD".repeat(8_000_000) + '"}';
  const t0 = performance.now();
  const v = parseStrictJson(big) as { data_b64: string };
  const ms = performance.now() - t0;
  t.equal(v.data_b64.length, 32_000_000, "parsed");
  // JSON.parse alone takes tens of ms here; the check adds one indexOf over the string
  t.ok(ms < 20_000, `32 MB body parsed strictly in ${ms.toFixed(0)} ms`);
  t.end();
});

test(`the strict scan stays linear once optimised on small texts (${compiledJson ? "dist/" : "the sources"}; CPU time, 100 times the linear cost allowed)`, (t) => {
  const { parseStrictJson, readJson, MAX_JSON_VALUES } = json;
  // warmed as a server warms it: thousands of small bodies without a \u escape
  const small = '{"namespace":"team","key":"x","data_b64":"AA==","dtype":"bytes","junk":[true,1,2.5e3,{"a":2}]}';
  for (let i = 0; i < 3000; i++) {
    parseStrictJson(small);
    readJson(small);
  }
  const array = (n: number, item: string) => `{"namespace":"n","v":[${Array(n).fill(item).join(",")}]}`;
  const shapes: Array<[string, string]> = [
    ["200,000 true values", array(200_000, "true")],
    ["1,000,000 spaces", `{"v":[${" ".repeat(1_000_000)}]}`],
    ["200,000 numbers", array(200_000, "12")],
    ["200,000 strings", array(200_000, '"ab"')],
    ["100,000 strings with an escape", array(100_000, '"\\u00e9"')],
    ["100,000 small objects", array(100_000, '{"a":1}')],
  ];
  for (const [label, text] of shapes) {
    // the text as a request body decodes it: one flat string
    const flat = Buffer.from(text).toString("utf8");
    const c0 = process.cpuUsage();
    parseStrictJson(flat);
    const used = process.cpuUsage(c0);
    const ms = (used.user + used.system) / 1000;
    // linear: 5-40 ms here; the quadratic scan took 7 s for 200,000 true values
    t.ok(ms < 3000, `${label} (${(flat.length / 1e6).toFixed(1)} MB) scanned in ${ms.toFixed(0)} ms of CPU`);
  }
  // the signed-receipt rules (RFC 8785 numbers), within their value limit
  const signed = Buffer.from(array(MAX_JSON_VALUES - 10, "true")).toString("utf8");
  const c0 = process.cpuUsage();
  t.equal(readJson(signed).problem, null, "a receipt-sized text of true values has no problem");
  const used = process.cpuUsage(c0);
  t.ok((used.user + used.system) / 1000 < 3000, `and is read in ${((used.user + used.system) / 1000).toFixed(0)} ms of CPU`);
  t.end();
});

const KEY = "svc-service-key-" + "0123456789abcdef".repeat(3);

test("parseStrictJson: lone surrogates and numbers a float64 cannot hold are refused, naming the member", (t) => {
  const cases: Array<[string, RegExp]> = [
    ['{"meta":{"label":"a\\ud800b"}}', /^The request body has a string with a lone surrogate in the member "label", which is not accepted\.$/],
    ['{"tags":["ok","\\udc00"]}', /lone surrogate in the member "tags"/],
    ['{"s":"\\ude00\\ud83d"}', /lone surrogate in the member "s"/],
    ['{"\\ud800x":1}', /member name with a lone surrogate/],
    ['"\\udbff"', /^The request body has a string with a lone surrogate, which is not accepted\.$/],
    ['{"x":{"y":1e400}}', /^The request body has the number 1e400 in the member "y", which a float64 cannot hold\.$/],
    ['{"v":[1,-2.5E+309]}', /number -2\.5E\+309 in the member "v"/],
    ['{"tiny":1e-400}', /number 1e-400 in the member "tiny"/],
    ['{"tiny":0.0000000001e-320}', /in the member "tiny"/],
    ['{"long":' + "7".repeat(400) + "}", /in the member "long", which a float64 cannot hold/],
  ];
  for (const [text, re] of cases) t.match(refusal(text), re, `refused: ${text.slice(0, 40)}`);
  t.match(refusal('{"a":"\ud800"}'), /lone surrogate/, "a JavaScript string holding a lone surrogate itself");
  const fine = [
    '{"e":"\\ud83d\\ude00"}',
    '{"z":0e-400,"w":0.000e999}',
    '{"m":[1.7976931348623157e308,5e-324,-0.0]}',
    '{"k":"\\\\ud800"}',
    '{"n":' + "1".repeat(300) + "}",
  ];
  for (const text of fine) t.deepEqual(parseStrictJson(text), JSON.parse(text), `accepted as JSON.parse reads it: ${text.slice(0, 40)}`);
  t.end();
});

test("engine: strict JSON bodies, X-SVC-Metadata and metadata", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-json-"));
  const e = await startEngine(loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: dir, SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_LOG_LEVEL: "silent" }));
  const H = { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", "content-type": "application/json" };
  const post = async (path: string, body: string | Uint8Array, headers: Record<string, string> = H) => {
    const r = await fetch(e.url + path, { method: "POST", headers, body });
    return { status: r.status, json: (await r.json()) as { detail: string; code: string; request_id: string } };
  };
  try {
    const data = Buffer.from([1, 2, 3]).toString("base64");
    let r = await post("/v1/put", `{"namespace":"default","key":"k","key":"other","data_b64":"${data}"}`);
    t.equal(r.status, 400, "duplicate top-level member: 400");
    t.match(r.json.detail, /^The request body names the member "key" twice in one object\.$/, "one sentence naming the member");
    t.equal(r.json.code, "bad_request", "bad_request");
    t.deepEqual(Object.keys(r.json).sort(), ["code", "detail", "request_id"], "error body shape");

    r = await post("/v1/put", `{"namespace":"default","key":"k","data_b64":"${data}","metadata":{"run":{"seed":1,"seed":2}}}`);
    t.equal(r.status, 400, "duplicate in metadata: 400");
    r = await post("/v1/put", `{"namespace":"default","key":"k","data_b64":"${data}","metadata":{"__proto__":{"x":1},"a":1}}`);
    t.equal(r.status, 400, "__proto__ in metadata: 400, not dropped");
    t.match(r.json.detail, /__proto__/, "detail names __proto__");
    r = await post("/v1/search", '{"namespace":"default","filter":{"a":1,"a":2}}');
    t.equal(r.status, 400, "duplicate in a filter: 400");
    r = await post("/v1/put", Buffer.concat([Buffer.from('{"namespace":"default","key":"k","data_b64":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]));
    t.match(r.json.detail, /not valid UTF-8/, "invalid UTF-8: 400");
    r = await post("/v1/put", `{"namespace":"default","key":"k","data_b64":"${data}"}`, { ...H, "content-type": "application/json; charset=latin1" });
    t.equal(r.status, 415, "a charset other than UTF-8: 415");
    r = await post("/v1/search", "[".repeat(100_000) + "]".repeat(100_000));
    t.equal(r.status, 400, "deep nesting: 400 (no stack overflow)");

    const octet = { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", "content-type": "application/octet-stream" };
    r = await post("/v1/put?namespace=default&key=h", Buffer.from([1, 2]), { ...octet, "x-svc-metadata": '{"a":1,"a":2}' });
    t.equal(r.status, 400, "duplicate in X-SVC-Metadata: 400");
    t.match(r.json.detail, /^X-SVC-Metadata names the member "a" twice/, "detail names the header");
    r = await post("/v1/put?namespace=default&key=h", Buffer.from([1, 2]), { ...octet, "x-svc-metadata": '{"__proto__":{"a":1}}' });
    t.equal(r.status, 400, "__proto__ in X-SVC-Metadata: 400");
    r = await post("/v1/put", `{"namespace":"default","key":"k","data_b64":"${data}","metadata":{"label":"x\\ud800"}}`);
    t.equal(r.status, 400, "a lone surrogate in metadata: 400, not stored as U+FFFD");
    t.match(r.json.detail, /member "label"/, "the detail names the member");
    r = await post("/v1/put", `{"namespace":"default","key":"k","data_b64":"${data}","metadata":{"big":1e400}}`);
    t.equal(r.status, 400, "1e400 in metadata: 400, not stored as null");
    t.match(r.json.detail, /number 1e400 in the member "big"/, "the detail names the member");
    r = await post("/v1/put?namespace=default&key=h", Buffer.from([1, 2]), { ...octet, "x-svc-metadata": '{"big":-1e999}' });
    t.match(r.json.detail, /^X-SVC-Metadata has the number -1e999 in the member "big"/, "in X-SVC-Metadata too");

    r = await post("/v1/put", `{"namespace":"default","key":"ok","data_b64":"${data}","metadata":{"a":{"b":1},"b":{"a":1},"p":"__proto__"}}`);
    t.equal(r.status, 201, "valid metadata stored");
    const g = await fetch(e.url + "/v1/get/default/ok", { headers: H });
    t.deepEqual(((await g.json()) as { metadata: unknown }).metadata, { a: { b: 1 }, b: { a: 1 }, p: "__proto__" }, "metadata kept whole");
  } finally {
    await e.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("library: metadata with a __proto__ member is refused, not dropped", async (t) => {
  const store = await createStore({ path: ":memory:" });
  try {
    await store.put("default", "k", new Uint8Array([1]), { metadata: JSON.parse('{"a":1,"__proto__":{"b":2}}') as Record<string, unknown> });
    t.fail("accepted");
  } catch (e) {
    t.ok(e instanceof ValidationError, "ValidationError");
    t.match((e as Error).message, /__proto__/, "names __proto__");
  }
  await store.close();
});
