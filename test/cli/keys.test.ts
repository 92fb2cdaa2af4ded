// `svc key create|ls|revoke` against a real engine and gateway: a read-only key limited to one
// namespace reads there and nowhere else and cannot write, ls shows it without its secret,
// revoke stops it; bad arguments are usage errors (exit 2) before any call, failures exit 1.
import test from "tape";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { svc } from "./helpers.js";
import { startStack } from "./stack.js";

test("svc key: create, use within scope, ls, revoke; usage errors and failures", async (t) => {
  const stack = await startStack(["default", "ns"]);
  try {
    const admin = { SVC_GATE_URL: stack.gateway, SVC_GATE_ENGINE_SERVICE_KEY: stack.serviceKey };
    const data = (key: string) => ({ SVC_GATE_URL: stack.gateway, SVC_API_KEY: key });
    const file = join(stack.dir, "blob.bin");
    await (await import("node:fs/promises")).writeFile(file, "hello");
    t.equal((await svc(["put", "ns", "k", file, "--bytes"], data(stack.apiKey))).code, 0, "the tenant's own key writes");

    const made = await svc(["key", "create", "t1", "ci reader", "--namespace", "ns", "--expires", "2099-01-01T00:00:00Z"], admin);
    t.equal(made.code, 0, `create exits 0 ${made.err}`);
    t.match(
      made.out,
      /^Created key key_[A-Za-z0-9_-]{16} 'ci reader' of tenant t1: read on namespaces ns, expires 2099-01-01T00:00:00\.000Z\.\n/,
      `create prints the key's terms: ${made.out.split("\n")[0]}`,
    );
    const key = /^SVC_API_KEY=(\S+)$/m.exec(made.out)?.[1];
    const keyId = /Created key (key_\S+)/.exec(made.out)?.[1];
    t.ok(key && keyId, "the key is printed once, with its id");

    t.equal((await svc(["get", "ns", "k"], data(key!))).code, 0, "the read key reads in its namespace");
    const outside = await svc(["ls", "default"], data(key!));
    t.equal(outside.code, 1, "outside its namespaces: exit 1");
    t.match(outside.err, /^svc: API key key_\S+ is not allowed namespace default/, `one sentence naming the namespace: ${outside.err.trim()}`);
    const write = await svc(["rm", "ns", "k"], data(key!));
    t.equal(write.code, 1, "a read key cannot delete");
    t.match(write.err, /lacks scope write/, `the sentence names the scope: ${write.err.trim()}`);

    const json = await svc(["key", "create", "t1", "writer", "--scopes", "read,write", "--json"], admin);
    const w = JSON.parse(json.out);
    t.deepEqual([w.scopes, w.namespaces, w.expires_at], [["read", "write"], null, null], "--json prints the gateway's answer");

    const ls = await svc(["key", "ls", "t1"], admin);
    t.equal(ls.code, 0);
    t.match(ls.out, /^KEY_ID\s+NAME\s+SCOPES\s+NAMESPACES\s+EXPIRES\s+CREATED\s+LAST_USED\n/, "a table");
    t.match(ls.out, new RegExp(`^${keyId}\\s+ci reader\\s+read\\s+ns\\s+2099-01-01T00:00:00\\.000Z\\s+\\S+\\s+20\\d\\d-`, "m"), "the reader, with a last use");
    t.match(ls.out, /^key_\S+\s+writer\s+read,write\s+\*\s+never\s+\S+\s+never$/m, "the writer, never used");
    t.notOk(ls.out.includes(key!) || ls.out.includes(w.api_key), "no secret listed");

    const rv = await svc(["key", "revoke", keyId!], admin);
    t.equal(rv.out, `Revoked key ${keyId} of tenant t1; it no longer works.\n`, "revoke");
    t.equal((await svc(["get", "ns", "k"], data(key!))).code, 1, "the revoked key is refused");
    const again = await svc(["key", "revoke", keyId!], admin);
    t.equal(again.code, 1, "revoking twice exits 1");
    t.match(again.err, /^svc: API key key_\S+ does not exist or was already revoked\. \(request [0-9a-f-]{36}\)\n$/, `one sentence: ${again.err.trim()}`);
    t.equal((await svc(["key", "ls", "nobody"], admin)).code, 1, "an unknown tenant exits 1");
    const outsideAcl = await svc(["key", "create", "t1", "x", "--namespace", "other"], admin);
    t.equal(outsideAcl.code, 1, "a namespace outside the tenant's ACL: the gateway refuses, exit 1");
    t.match(outsideAcl.err, /other is not a namespace of tenant t1/);

    const usage: Array<[string[], RegExp]> = [
      [["key"], /Missing subcommand/],
      [["key", "frob"], /Unknown key subcommand 'frob'/],
      [["key", "create", "t1"], /./],
      [["key", "create", "T1", "x"], /Invalid tenant id/],
      [["key", "create", "t1", " bad"], /Invalid key name/],
      [["key", "create", "t1", "n".repeat(300)], /^svc: Invalid key name "n{59}\.\.\. \(300 characters\): name must be at most 64 characters\.$/m],
      [["key", "create", "t1", "x", "--scopes", "write"], /write needs read/],
      [["key", "create", "t1", "x", "--scopes", "read,read"], /twice/],
      [["key", "create", "t1", "x", "--scopes", "admin"], /unknown scope/],
      [["key", "create", "t1", "x", "--scopes", ""], /unknown scope|must not be empty/],
      [["key", "create", "t1", "x", "--namespace", "no spaces"], /Invalid namespace/],
      [["key", "create", "t1", "x", "--expires", "2099-01-01"], /ISO 8601 UTC/],
      [["key", "create", "t1", "x", "--expires", "2099-02-30T00:00:00Z"], /ISO 8601 UTC/],
      [["key", "create", "t1", "x", "--bogus"], /./],
      [["key", "revoke", "primary"], /rotate it/],
      [["key", "revoke", "../../etc"], /Invalid key id/],
      [["key", "ls"], /./],
    ];
    for (const [argv, re] of usage) {
      const r = await svc(argv, admin);
      t.equal(r.code, 2, `${argv.join(" ")}: exit 2`);
      t.match(r.err, re, `${argv.join(" ")}: ${r.err.split("\n")[0]}`);
      t.notOk(r.err.includes("    at "), `${argv.join(" ")}: no stack`);
    }
    const past = await svc(["key", "create", "t1", "x", "--expires", "2001-01-01T00:00:00Z"], admin);
    t.equal(past.code, 1, "an expiry in the past: the gateway refuses, exit 1");
    t.match(past.err, /is not in the future/);
    const help = await svc(["key", "--help"], admin);
    t.equal(help.code, 0, "--help exits 0");
    t.match(help.out, /svc key create TENANT NAME/);
    t.match(help.out, /at most 20 scoped keys/, "the help names the limit");

    const audit = (await readFile(join(stack.dir, "audit.jsonl"), "utf8"))
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { key_id: string; status: number; path: string });
    t.ok(
      audit.some((r) => r.key_id === keyId && r.status === 403),
      "the audit log names the key of a refused request",
    );
  } finally {
    await stack.close();
  }
});
