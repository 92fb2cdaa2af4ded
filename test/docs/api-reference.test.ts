// docs/api.md is the complete HTTP reference: every route of the gateway's generated OpenAPI
// document (billing routes included), every field of their JSON request bodies, every error
// code, and every route the engine and the provenance appliance register, appear in it.
import test from "tape";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { openApiDocument } from "../../server/gateway/openapi.js";
import { STATUS_OF } from "../../lib/errors.js";

const root = fileURLToPath(new URL("../..", import.meta.url));
const doc = readFileSync(`${root}/docs/api.md`, "utf8");
const norm = (p: string) => p.replace(/\{namespace\}/g, "{ns}");
const mentions = (method: string, path: string) => doc.includes(`\`${method} ${norm(path)}`);

type Schema = { properties?: Record<string, Schema>; items?: Schema; $ref?: string; allOf?: Schema[]; anyOf?: Schema[]; oneOf?: Schema[] };

test("every route of the OpenAPI document is in docs/api.md, with every field of its JSON body", (t) => {
  const api = openApiDocument({ billing: {} }) as {
    paths: Record<string, Record<string, { requestBody?: { content?: Record<string, { schema?: Schema }> } }>>;
    components?: { schemas?: Record<string, Schema> };
  };
  const resolve = (s: Schema | undefined): Schema | undefined => (s?.$ref ? api.components?.schemas?.[s.$ref.split("/").pop()!] : s);
  const fields = (s: Schema | undefined, out = new Set<string>()): Set<string> => {
    const r = resolve(s);
    if (!r) return out;
    for (const [k, v] of Object.entries(r.properties ?? {})) {
      out.add(k);
      fields(v, out);
    }
    for (const x of [...(r.allOf ?? []), ...(r.anyOf ?? []), ...(r.oneOf ?? [])]) fields(x, out);
    if (r.items) fields(r.items, out);
    return out;
  };
  let routes = 0;
  for (const [path, ops] of Object.entries(api.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      routes++;
      const m = method.toUpperCase();
      t.ok(mentions(m, path), `${m} ${path} is documented`);
      const schema = op.requestBody?.content?.["application/json"]?.schema;
      for (const f of fields(schema)) t.ok(doc.includes(`\`${f}\``), `${m} ${path}: field \`${f}\` is documented`);
    }
  }
  t.ok(routes >= 25, `${routes} routes checked`);
  t.end();
});

test("every error code and status is in docs/api.md's table", (t) => {
  for (const [code, status] of Object.entries(STATUS_OF)) {
    t.ok(new RegExp(`^\\| ${status} \\| \`${code}\` \\|`, "m").test(doc), `${status} ${code}`);
  }
  t.end();
});

test("the engine's and the appliance's routes are in docs/api.md", (t) => {
  const engine = readFileSync(`${root}/server/engine/app.ts`, "utf8");
  const eRoutes = [...engine.matchAll(/app\.(get|post|delete)\(\s*(?:"([^"]+)"|\/\^\\\/v1\\\/(\w+)\\\/)/g)].map((m) => [
    m[1]!.toUpperCase(),
    m[2] ?? `/v1/${m[3]}/`,
  ]);
  t.ok(eRoutes.length >= 12, `${eRoutes.length} engine routes found`);
  for (const [m, p] of eRoutes) t.ok(doc.includes(`\`${m} ${p}`), `engine ${m} ${p}`);
  const prov = readFileSync(`${root}/server/provenance/app.ts`, "utf8");
  const exact =
    /const EXACT_PATH = "([^"]+)"/.exec(prov)?.[1] ?? /EXACT_PATH\s*=\s*"([^"]+)"/.exec(readFileSync(`${root}/server/provenance/app.ts`, "utf8"))?.[1];
  const pRoutes = [...prov.matchAll(/app\.(get|post)\(\s*(?:"([^"]+)"|(EXACT_PATH))/g)].map((m) => [m[1]!.toUpperCase(), m[2] ?? exact!]);
  t.ok(pRoutes.length >= 6, `${pRoutes.length} appliance routes found`);
  for (const [m, p] of pRoutes) t.ok(doc.includes(`\`${m} ${p}\``), `appliance ${m} ${p}`);
  t.end();
});
