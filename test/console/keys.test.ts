// The console's scoped keys in a real browser (Debian's Chromium through playwright-core) against
// a gateway and a real engine: the admin tenant page lists a tenant's keys without secrets,
// creates one limited to a namespace with an expiry and shows it once, shows the gateway's
// sentence for a refused form, and revokes a key behind a confirmation that names it.
import test from "tape";
import { execFileSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine } from "../../server/engine/server.js";
import { chromiumMissing, launchBrowser } from "./browser.js";
import { admin, SERVICE_KEY, startTestGateway } from "../gateway/helpers.js";

declare const document: any;

const root = new URL("../..", import.meta.url).pathname;
const missing = chromiumMissing();

test("console in Chromium: a tenant's scoped keys listed, created (shown once), refused, revoked", { skip: missing !== null }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-console-keys-"));
  // A build of the console's own, so that this test never races another over dist/console.
  execFileSync(process.execPath, [join(root, "scripts", "build-console.mjs"), join(dir, "console")], { stdio: "pipe" });
  const engine = await startEngine(
    loadEngineConfig({
      SVC_ENGINE_HOST: "127.0.0.1",
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      SVC_ENGINE_API_KEYS: SERVICE_KEY,
      SVC_ENGINE_LOG_LEVEL: "silent",
    }),
  );
  const gw = await startTestGateway(engine.url, { consoleDir: join(dir, "console") });
  const browser = await launchBrowser();
  try {
    t.equal((await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme", namespaces: ["default", "team"] })).status, 201);
    const old = await admin(gw.url, "/gate/admin/keys", { tenant_id: "acme", name: "old-ci", scopes: ["read", "write"] });
    t.equal((await fetch(`${gw.url}/v1/list/default`, { headers: { "x-api-key": old.json.api_key } })).status, 200, "the first key works");

    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    page.on("console", (m) => {
      if (m.type() === "error" && !/status of 400/.test(m.text())) errors.push(m.text());
    });
    await page.goto(`${gw.url}/console/`);
    await page.locator("input[value=admin]").check();
    await page.getByTestId("key").fill(SERVICE_KEY);
    await page.getByTestId("key").press("Enter");
    await page.getByRole("link", { name: "acme" }).click();
    await page.getByTestId("keys").waitFor();

    const row = await page.locator(`tr[data-key=${old.json.key_id}] td`).allTextContents();
    t.deepEqual(row.slice(0, 5), ["old-ci", old.json.key_id, "read, write", "all", "never"], "the key listed: name, id, scopes, namespaces, expiry");
    t.equal(row[6], new Date(gw.clock.now()).toISOString(), "with its last use");
    t.notOk((await page.content()).includes(old.json.api_key), "no secret on the page");

    // The gateway's sentence for a refused form (a name with a slash).
    await page.getByTestId("key-name").fill("a/b");
    await page.getByRole("button", { name: "Create key" }).click();
    await page.locator(".banner.error").waitFor();
    t.match(
      (await page.locator(".banner.error").textContent()) ?? "",
      /^name may contain only A-Z a-z 0-9 \. _ - and inner spaces\.$/,
      "the refusal's sentence is shown",
    );

    // Create: read only, namespace team, expiring; the key shown once.
    await page.getByTestId("key-name").fill("team reader");
    await page.getByTestId("key-scopes").selectOption("read");
    await page.locator("input[name=ns][value=team]").check();
    await page.getByTestId("key-expires").fill("2027-03-01");
    await page.getByRole("button", { name: "Create key" }).click();
    await page.getByTestId("new-key").waitFor();
    const key = await page.getByTestId("new-key").inputValue();
    t.match(key, /^svc_live_/, "the new key is shown");
    t.match(
      (await page.locator("dialog .warning").textContent()) ?? "",
      /shown once.*revoke it and create another/,
      "with the warning that it is not shown again",
    );
    await page.getByRole("button", { name: "I have stored the key" }).click();
    await page.waitForFunction(() => document.querySelectorAll("[data-testid=keys] tbody tr").length === 2);
    t.equal(await page.locator("dialog").count(), 0, "the key is gone from the page once closed");
    const listed = await admin(gw.url, "/gate/admin/keys/acme", undefined, "GET");
    const made = listed.json.keys.find((k: { name: string }) => k.name === "team reader");
    t.deepEqual([made.scopes, made.namespaces, made.expires_at], [["read"], ["team"], "2027-03-01T00:00:00.000Z"], "created with the form's terms");
    t.equal((await fetch(`${gw.url}/v1/list/team`, { headers: { "x-api-key": key } })).status, 200, "the shown key reads in team");
    t.equal((await fetch(`${gw.url}/v1/list/default`, { headers: { "x-api-key": key } })).status, 403, "and nowhere else");

    // Revoke, behind a confirmation naming the key.
    await page.getByTestId("revoke-old-ci").click();
    t.equal((await page.locator("dialog h2").textContent())?.trim(), "Revoke key old-ci?", "the confirmation names the key");
    await page.getByRole("button", { name: "Revoke old-ci" }).click();
    await page.waitForFunction(() => document.querySelectorAll("[data-testid=keys] tbody tr").length === 1);
    t.match((await page.locator(".banner.notice").textContent()) ?? "", /Key old-ci of acme is revoked\./, "a notice says so");
    t.equal((await fetch(`${gw.url}/v1/list/default`, { headers: { "x-api-key": old.json.api_key } })).status, 401, "the revoked key stops working");
    t.deepEqual(errors, [], "no script error");
    await context.close();
  } finally {
    await browser.close();
    await gw.close();
    await engine.close();
    await rm(dir, { recursive: true, force: true });
  }
});

if (missing) {
  test("console scoped-keys browser checks", (t) => {
    if (process.env.CI) t.fail(missing);
    else t.skip(missing);
    t.end();
  });
}
