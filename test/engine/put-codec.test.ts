// The codec options of put over the engine's HTTP, in both forms (JSON body and
// octet-stream with query parameters): codec and max_abs_error reach the store, the answer
// names the codec and both measured errors, and hostile values are 400 bad_request with a
// one-sentence detail naming the option (1e400 in JSON text is a number too large to be finite).
import test from "tape";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { createStore } from "../../lib/store/index.js";
import { createApp } from "../../server/engine/app.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { gaussian } from "../tt/helpers.js";

const KEY = "svc-service-key-" + "0123456789abcdef".repeat(3);

async function engine() {
  const store = await createStore({ path: ":memory:" });
  const config = loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_LOG_LEVEL: "silent" });
  const server = http.createServer(createApp({ store, config, gpu: { unavailable: "no GPU in this test" } }));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    close: async () => {
      await new Promise<void>((r) => server.close(() => r()));
      await store.close();
    },
  };
}

async function post(url: string, path: string, body: string | Uint8Array, type: string) {
  const res = await fetch(url + path, { method: "POST", headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", "content-type": type }, body });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

const g = gaussian(1);
const data = Float32Array.from({ length: 8192 }, () => g());
const b64 = Buffer.from(data.buffer).toString("base64");
const jsonPut = (extra: string) => `{"namespace":"ns","key":"k","dtype":"float32","shape":[8192],"data_b64":"${b64}"${extra}}`;

test("put over HTTP: codec and max_abs_error in the JSON and octet-stream forms", async (t) => {
  const e = await engine();
  try {
    const a = await post(e.url, "/v1/put", jsonPut(`,"max_abs_error":0.002,"codec":"pred"`), "application/json");
    t.equal(a.status, 201, "JSON put with codec pred and max_abs_error");
    const fp = a.json.fingerprint as { codec: string };
    t.ok(
      fp.codec === "pred" && (a.json.max_abs_error as number) <= 0.002 && typeof a.json.relative_error === "number",
      `answer: codec ${fp.codec}, max_abs_error ${a.json.max_abs_error}, relative_error ${a.json.relative_error}`,
    );
    const b = await post(
      e.url,
      "/v1/put?namespace=ns&key=o&dtype=float32&shape=8192&max_abs_error=0&codec=auto",
      new Uint8Array(data.buffer),
      "application/octet-stream",
    );
    t.ok(b.status === 201 && b.json.max_abs_error === 0 && b.json.relative_error === 0, `octet-stream put with max_abs_error=0: exact (${b.json.verdict})`);
    const get = await fetch(`${e.url}/v1/get/ns/k`, { headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme" } });
    const info = (await get.json()) as Record<string, unknown>;
    t.deepEqual(
      [info.max_abs_error, (info.fingerprint as { codec: string }).codec],
      [a.json.max_abs_error, "pred"],
      "get reports the same codec and max_abs_error",
    );

    for (const [extra, field] of [
      [`,"max_abs_error":-1`, "max_abs_error"],
      [`,"max_abs_error":"x"`, "max_abs_error"],
      [`,"max_abs_error":1e400`, "max_abs_error"],
      [`,"max_abs_error":null`, "max_abs_error"],
      [`,"codec":"zfp"`, "codec"],
      [`,"codec":7`, "codec"],
      [`,"tolerance":-0.5`, "tolerance"],
    ]) {
      const r = await post(e.url, "/v1/put", jsonPut(extra!), "application/json");
      const detail = String(r.json.detail);
      t.ok(
        r.status === 400 && r.json.code === "bad_request" && detail.includes(field!) && /\.$/.test(detail) && !detail.includes("\n"),
        `JSON ${extra}: ${r.status} ${detail}`,
      );
    }
    for (const [q, field] of [
      ["max_abs_error=-1", "max_abs_error"],
      ["max_abs_error=x", "max_abs_error"],
      ["max_abs_error=1e400", "max_abs_error"],
      ["max_abs_error=", "max_abs_error"],
      ["codec=zfp", "codec"],
      ["codec=TT", "codec"],
    ]) {
      const r = await post(e.url, `/v1/put?namespace=ns&key=q&dtype=float32&shape=8192&${q}`, new Uint8Array(data.buffer), "application/octet-stream");
      t.ok(r.status === 400 && r.json.code === "bad_request" && String(r.json.detail).includes(field!), `octet-stream ${q}: ${r.status} ${r.json.detail}`);
    }
  } finally {
    await e.close();
  }
});
