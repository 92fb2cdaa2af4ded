// The console's edges in a real browser (Debian's Chromium through playwright-core) against a
// gateway and a real engine: a page still loading when the user signs out or moves on renders
// nothing; a key that stops working during an action on a page (slider, Download .npy, an admin
// action) signs the tab out with the API's sentence; a key with a character a header cannot
// carry is refused in the form; long metadata values and long keys stay inside their own box;
// the sign-in field shows a whole service key; bad filters are refused with the form kept; an
// offset past the end; and Escape on a confirmation gives the focus back to its button.
import test from "tape";
import { execFileSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser, Page, Route } from "playwright-core";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine } from "../../server/engine/server.js";
import { chromiumMissing, launchBrowser, putField, smoothField } from "./browser.js";
import { admin, SERVICE_KEY, startTestGateway } from "../gateway/helpers.js";

declare const document: any, window: any, sessionStorage: any, location: any;

const root = new URL("../..", import.meta.url).pathname;
const missing = chromiumMissing();
const SHAPE = [8, 6, 4] as const;
const PATH_VALUE = `/mnt/shared/experiments/2026-11-27/turbulence/run-0042/checkpoints/epoch-0100/fields/velocity-magnitude-f32-final.npy`;
const LONG_KEY = `long-${"x".repeat(495)}`;

let dir = "";
let gw: Awaited<ReturnType<typeof startTestGateway>>;
let engine: Awaited<ReturnType<typeof startEngine>>;
let browser: Browser;
let acme = "";

/** A page with the console open, script errors collected (answers the test provokes are logged by the browser). */
async function openConsole(viewport = { width: 1280, height: 800 }): Promise<{ page: Page; errors: string[]; close(): Promise<void> }> {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  await page.addInitScript(RECORD_FETCHES);
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => {
    if (m.type() === "error" && !/Failed to load resource: the server responded with a status of (400|401)/.test(m.text())) errors.push(m.text());
  });
  await page.goto(`${gw.url}/console/`);
  return { page, errors, close: () => context.close() };
}

async function signIn(page: Page, key: string, kind: "tenant" | "admin" = "tenant"): Promise<void> {
  if (kind === "admin") await page.locator("input[value=admin]").check();
  await page.getByTestId("key").fill(key);
  await page.getByTestId("key").press("Enter");
  await page.getByTestId("who").waitFor();
}

const bannerText = async (page: Page) => ((await page.locator(".banner.error").textContent()) ?? "").trim();

/** Holds the answers to requests matching `pattern` until release() is called. */
async function holdRequests(page: Page, pattern: string): Promise<{ release(): void; remove(): Promise<void> }> {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const handler = async (route: Route) => {
    await gate;
    // A request the page has cancelled meanwhile cannot be continued.
    await route.continue().catch(() => undefined);
  };
  await page.route(pattern, handler);
  return { release, remove: () => page.unroute(pattern, handler) };
}

/** Records how each fetch of the page ends: answered, or cancelled by the page (AbortError). */
const RECORD_FETCHES = `
  window.__fetches = [];
  const original = window.fetch;
  window.fetch = function (input, init) {
    const rec = { url: String(input), outcome: "pending" };
    window.__fetches.push(rec);
    const p = original.call(this, input, init);
    p.then(() => (rec.outcome = "answered"), (e) => (rec.outcome = e && e.name === "AbortError" ? "cancelled" : "failed"));
    return p;
  };
`;

/**
 * After `release`, one of two states comes: the page's fetch of `urlPart` ends cancelled (the page
 * dropped it), or the page shows `shown` (it rendered the late answer). Says which.
 */
async function lateAnswer(page: Page, urlPart: string, shown: string, release: () => void): Promise<"cancelled" | "rendered"> {
  const cancelled = page
    .waitForFunction((part: string) => window.__fetches.some((f: any) => f.url.includes(part) && f.outcome === "cancelled"), urlPart, { timeout: 20_000 })
    .then(() => "cancelled" as const);
  const rendered = page
    .locator(shown)
    .first()
    .waitFor({ timeout: 20_000 })
    .then(() => "rendered" as const);
  release();
  return Promise.race([cancelled, rendered]);
}

test("set-up: a console build, a gateway and an engine, a tenant's entries", { skip: missing !== null }, async (t) => {
  dir = await mkdtemp(join(tmpdir(), "svc-console-edges-"));
  // A build of the console's own, so that this test never races another over dist/console.
  execFileSync(process.execPath, [join(root, "scripts", "build-console.mjs"), join(dir, "console")], { stdio: "pipe" });
  engine = await startEngine(
    loadEngineConfig({
      SVC_ENGINE_HOST: "127.0.0.1",
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      SVC_ENGINE_API_KEYS: SERVICE_KEY,
      SVC_ENGINE_LOG_LEVEL: "silent",
    }),
  );
  gw = await startTestGateway(engine.url, { consoleDir: join(dir, "console"), defaultRateLimit: { requests: 100_000, window_s: 60 } });
  browser = await launchBrowser();
  const made = await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme", namespaces: ["default", "team"] });
  t.equal(made.status, 201, "tenant acme created");
  acme = made.json.api_key;
  await putField(gw.url, acme, "default", "field/a", SHAPE, smoothField(SHAPE, 1), { source: PATH_VALUE, note: "n".repeat(5000), run: 3 });
  for (let i = 0; i < 5; i++) await putField(gw.url, acme, "default", `b${i}`, SHAPE, smoothField(SHAPE, i + 2), { run: i });
  await putField(gw.url, acme, "default", LONG_KEY, SHAPE, smoothField(SHAPE, 9), {});
  t.equal(
    ((await (await fetch(`${gw.url}/v1/list/default`, { headers: { "x-api-key": acme } })).json()) as { total: number }).total,
    7,
    "seven entries in default",
  );
});

test("a page still loading renders nothing after sign-out or another navigation", { skip: missing !== null }, async (t) => {
  const { page, errors, close } = await openConsole();
  await signIn(page, acme);
  await page.getByTestId("namespaces").waitFor();

  // The entry page's get held; sign out meanwhile.
  const gets = await holdRequests(page, "**/v1/get/**");
  const waitingGet = page.waitForRequest((r) => r.url().includes("/v1/get/"));
  await page.evaluate(() => (location.hash = "#/entry/default/field/a"));
  await waitingGet;
  await page.getByTestId("signout").click();
  await page.getByTestId("signin").waitFor();
  t.equal(await lateAnswer(page, "/v1/get/", "[data-testid=metadata]", gets.release), "cancelled", "sign-out cancels the entry page's get");
  t.equal(await page.getByTestId("signin").count(), 1, "the sign-in form stays");
  t.equal(await page.getByTestId("metadata").count(), 0, "no metadata of the tenant on the page");
  t.equal(await page.locator("#banner").isHidden(), true, "no banner (no 'Missing API key')");
  t.equal(await page.evaluate(() => sessionStorage.length), 0, "no key kept");
  await gets.remove();

  // The tenant home's account call held; sign out meanwhile.
  await signIn(page, acme);
  await page.getByTestId("namespaces").waitFor();
  await page.getByRole("link", { name: "default" }).click();
  await page.getByTestId("entries").waitFor();
  const account = await holdRequests(page, "**/gate/account");
  const waitingAccount = page.waitForRequest((r) => r.url().endsWith("/gate/account"));
  await page.getByRole("link", { name: "Namespaces and usage" }).click();
  await waitingAccount;
  await page.getByTestId("signout").click();
  await page.getByTestId("signin").waitFor();
  t.equal(await lateAnswer(page, "/gate/account", "[data-testid=namespaces]", account.release), "cancelled", "sign-out cancels the home page's call");
  t.equal(await page.getByTestId("namespaces").count(), 0, "no namespaces of the tenant on the page");
  await account.remove();

  // Another navigation while the entry page loads: the later page stays.
  await signIn(page, acme);
  await page.getByTestId("namespaces").waitFor();
  await page.evaluate(() => (window.__fetches.length = 0));
  const again = await holdRequests(page, "**/v1/get/**");
  const waitingAgain = page.waitForRequest((r) => r.url().includes("/v1/get/"));
  await page.evaluate(() => (location.hash = "#/entry/default/field/a"));
  await waitingAgain;
  await page.evaluate(() => (location.hash = "#/"));
  await page.getByTestId("namespaces").waitFor();
  t.equal(await lateAnswer(page, "/v1/get/", "[data-testid=metadata]", again.release), "cancelled", "moving on cancels the entry page's get");
  t.equal(await page.getByTestId("namespaces").count(), 1, "the home page stays");
  await again.remove();
  t.deepEqual(errors, [], "no script error");
  await close();
});

test("a key that stops working during an action signs the tab out with the API's sentence", { skip: missing !== null }, async (t) => {
  const made = await admin(gw.url, "/gate/onboard/create", { tenant_id: "rot", namespaces: ["default"] });
  let key = made.json.api_key as string;
  await putField(gw.url, key, "default", "cube", SHAPE, smoothField(SHAPE, 3), {});
  const rotate = async () => (key = (await admin(gw.url, "/gate/onboard/rotate-key", { tenant_id: "rot" })).json.api_key);
  const { page, errors, close } = await openConsole();

  // Moving the slice slider after the key was rotated.
  await signIn(page, key);
  await page.evaluate(() => (location.hash = "#/entry/default/cube"));
  await page.waitForFunction(() => !!document.querySelector("[data-testid=slice-canvas]")?.dataset.view);
  await rotate();
  await page.getByTestId("slider-2").focus();
  await page.keyboard.press("ArrowRight");
  await page.getByTestId("signin").waitFor({ timeout: 15_000 });
  t.equal(await bannerText(page), "Invalid API key.", "slider: signed out with the API's sentence");
  t.equal(await page.evaluate(() => sessionStorage.length), 0, "slider: the dead key is forgotten");

  // Download .npy after the key was rotated.
  await signIn(page, key);
  await page.evaluate(() => (location.hash = "#/entry/default/cube"));
  await page.waitForFunction(() => !!document.querySelector("[data-testid=slice-canvas]")?.dataset.view);
  await rotate();
  await page.getByTestId("download-npy").click();
  await page.getByTestId("signin").waitFor({ timeout: 15_000 });
  t.equal(await bannerText(page), "Invalid API key.", "download: signed out with the API's sentence");
  t.equal(await page.evaluate(() => sessionStorage.length), 0, "download: the dead key is forgotten");

  // An admin action refused because the service key no longer works (the gateway's own 401 answer).
  await signIn(page, SERVICE_KEY, "admin");
  await page.getByRole("link", { name: "rot" }).click();
  await page.getByTestId("add-ns").waitFor();
  await page.route("**/gate/onboard/add-namespace", (route) =>
    route.continue({ headers: { ...route.request().headers(), authorization: "Bearer a-service-key-that-was-replaced-0123456789" } }),
  );
  await page.getByTestId("add-ns").fill("extra");
  await page.getByRole("button", { name: "Add namespace" }).click();
  await page.getByTestId("signin").waitFor({ timeout: 15_000 });
  t.equal(await bannerText(page), "Invalid service key.", "admin action: signed out with the API's sentence");
  t.equal(await page.evaluate(() => sessionStorage.length), 0, "admin action: the key is forgotten");
  t.deepEqual(errors, [], "no script error");
  await close();
});

test("a key with a character a header cannot carry is refused in the form; whitespace around it is trimmed", { skip: missing !== null }, async (t) => {
  const { page, errors, close } = await openConsole();
  const sent: string[] = [];
  page.on("request", (r) => sent.push(r.url()));
  for (const [name, bad, code] of [
    ["a trailing zero-width space", `${acme}\u200b`, "U\\+200B"],
    ["an ellipsis", `${acme.slice(0, 20)}\u2026`, "U\\+2026"],
  ] as const) {
    await page.getByTestId("key").fill(bad);
    await page.getByTestId("key").press("Enter");
    await page.locator(".banner.error").waitFor();
    const text = await bannerText(page);
    t.match(
      text,
      new RegExp(`^The Key field holds a character that cannot be part of a key \\(${code} at position \\d+; keys are printable ASCII\\)`),
      `${name}: ${text}`,
    );
    t.equal(await page.getByTestId("signin").count(), 1, `${name}: still on the sign-in form`);
  }
  t.notOk(
    sent.some((u) => u.includes("/gate/")),
    "no request sent with such a key",
  );
  await page.getByTestId("key").fill(`  ${acme}\t `);
  await page.getByTestId("key").press("Enter");
  await page.getByTestId("namespaces").waitFor();
  t.equal((await page.getByTestId("who").textContent())?.trim(), "tenant acme", "a key with whitespace around it signs in");
  t.deepEqual(errors, [], "no script error");
  await close();
});

test("long metadata values and long keys stay inside their own box; the sign-in field shows a whole key", { skip: missing !== null }, async (t) => {
  // The sign-in field at a desktop width holds a whole service key (64 characters) and tenant key (52).
  const desk = await openConsole();
  for (const k of ["f".repeat(64), `svc_live_${"A".repeat(43)}`]) {
    await desk.page.getByTestId("key").fill(k);
    const fit = await desk.page.getByTestId("key").evaluate((el: any) => ({ scroll: el.scrollWidth, client: el.clientWidth }));
    t.ok(fit.scroll <= fit.client, `a ${k.length}-character key shows whole: ${fit.scroll} px of text in a ${fit.client} px field`);
  }

  // A 500-character key in the namespace table: the other columns stay on screen.
  await signIn(desk.page, acme);
  await desk.page.evaluate(() => (location.hash = "#/ns/default"));
  await desk.page.getByTestId("entries").waitFor();
  const table = await desk.page.evaluate(() => {
    const wrap = document.querySelector(".table-wrap");
    const last = Array.from(document.querySelectorAll("[data-testid=entries] th") as ArrayLike<any>).at(-1);
    return { scroll: wrap.scrollWidth, client: wrap.clientWidth, lastRight: last.getBoundingClientRect().right, width: window.innerWidth };
  });
  t.ok(table.scroll <= table.client, `the table fits its box at 1,280 px (${table.scroll} of ${table.client} px)`);
  t.ok(table.lastRight <= table.width, `the last column is on screen (right edge ${Math.round(table.lastRight)} px)`);
  const link = desk.page.locator(`[data-testid=entries] a[href$="${LONG_KEY}"]`);
  t.equal(await link.getAttribute("title"), LONG_KEY, "the whole key is the link's title");
  t.equal(await link.textContent(), LONG_KEY, "and its text");
  await desk.close();

  // The entry page on a phone: a 120-character path and a 5,000-character value wrap in the metadata box.
  const phone = await openConsole({ width: 390, height: 844 });
  await signIn(phone.page, acme);
  await phone.page.evaluate(() => (location.hash = "#/entry/default/field/a"));
  await phone.page.waitForFunction(() => !!document.querySelector("[data-testid=slice-canvas]")?.dataset.view);
  // (no named function inside: the test runner's transform would name it with a helper the page lacks)
  const layout = await phone.page.evaluate(() => {
    const [metadata, sha, canvas] = ["[data-testid=metadata]", "[data-testid=fingerprint] dd", "[data-testid=slice-canvas]"].map((sel) =>
      Math.round(document.querySelector(sel).getBoundingClientRect().right),
    );
    return { page: document.documentElement.scrollWidth, metadata, sha, canvas };
  });
  t.ok(layout.page <= 390, `the page is ${layout.page} px wide at a 390 px viewport`);
  t.ok(layout.metadata <= 390 && layout.sha <= 390 && layout.canvas <= 390, `metadata, sha256 and the slice inside the screen (${JSON.stringify(layout)})`);
  t.match((await phone.page.getByTestId("metadata").textContent()) ?? "", new RegExp(PATH_VALUE.replaceAll("/", "\\/")), "the path is shown whole");
  t.deepEqual([...desk.errors, ...phone.errors], [], "no script error");
  await phone.close();
});

test("a bad metadata filter is refused with the form kept", { skip: missing !== null }, async (t) => {
  const { page, errors, close } = await openConsole();
  await signIn(page, acme);
  await page.evaluate(() => (location.hash = "#/ns/default"));
  await page.getByTestId("entries").waitFor();

  // Not JSON: refused in the form, the input kept as typed.
  await page.getByTestId("filter").fill("{run: 3}");
  await page.getByTestId("filter").press("Enter");
  await page.locator(".banner.error").waitFor();
  t.match(await bannerText(page), /^The metadata filter is not valid JSON/, "a filter that is not JSON: one sentence");
  t.equal(await page.getByTestId("filter").inputValue(), "{run: 3}", "the input kept as typed");
  t.equal(await page.getByTestId("filter").getAttribute("aria-invalid"), "true", "the field marked invalid");

  // An operator the API does not know: its sentence, the form kept.
  await page.getByTestId("filter").fill('{"run": {"$near": 3}}');
  await page.getByTestId("filter").press("Enter");
  await page.waitForFunction(() => location.hash.includes("filter="));
  await page.getByTestId("empty").waitFor();
  t.match(await bannerText(page), /\$near/, `an unknown operator: the API's sentence (${await bannerText(page)})`);
  t.equal(await page.getByTestId("filter").inputValue(), '{"run": {"$near": 3}}', "the form kept with the input");
  await page.getByTestId("filter").fill('{"run": {"$gte": 3}}');
  await page.getByTestId("filter").press("Enter");
  // field/a, b3 and b4 have run ≥ 3.
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=entries] tbody tr").length === 3);
  t.pass("corrected in place, the search runs");
  t.deepEqual(errors, [], "no script error");
  await close();
});

test("an offset past the last entry: a sentence and a link to the first page", { skip: missing !== null }, async (t) => {
  const { page, errors, close } = await openConsole();
  await signIn(page, acme);
  await page.getByTestId("namespaces").waitFor();
  await page.evaluate(() => (location.hash = "#/ns/default?offset=100"));
  await page.getByTestId("first-page").waitFor();
  t.equal((await page.getByTestId("total").textContent())?.trim(), "No entries from 101 on: 7 entries match.", "an offset past the end says so");
  await page.getByTestId("first-page").click();
  await page.getByTestId("entries").waitFor();
  t.equal((await page.getByTestId("total").textContent())?.trim(), "Entries 1–7 of 7", "the first page");
  t.deepEqual(errors, [], "no script error");
  await close();
});

test("audit filters out of the API's ranges are refused with the form kept", { skip: missing !== null }, async (t) => {
  const { page, errors, close } = await openConsole();
  await signIn(page, SERVICE_KEY, "admin");
  await page.getByRole("link", { name: "Audit log" }).click();
  await page.getByTestId("audit").waitFor();
  for (const [field, value, sentence] of [
    ["audit-status", "abc", "Status is a three-digit HTTP status, for example 401."],
    ["audit-limit", "5000", "Records is a whole number from 1 to 1000."],
    ["audit-limit", "-1", "Records is a whole number from 1 to 1000."],
  ] as const) {
    await page.getByTestId("audit-status").fill(field === "audit-status" ? value : "");
    await page.locator("input[name=limit]").fill(field === "audit-limit" ? value : "100");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.locator(".banner.error").waitFor();
    t.equal(await bannerText(page), sentence, `${value}: ${sentence}`);
    t.equal(await page.locator(field === "audit-status" ? "[data-testid=audit-status]" : "input[name=limit]").inputValue(), value, `${value}: the input kept`);
    t.equal(await page.getByTestId("audit").count(), 1, `${value}: the records stay`);
  }
  await page.evaluate(() => (location.hash = "#/admin/audit?limit=5000"));
  await page.getByTestId("empty").waitFor();
  t.equal(await bannerText(page), "Records is a whole number from 1 to 1000.", "an address with Records 5000: the sentence, the form kept");
  t.equal(await page.locator("input[name=limit]").inputValue(), "5000", "with its value to correct");
  t.deepEqual(errors, [], "no script error");
  await close();
});

test("Escape on a confirmation gives the focus back to the button that opened it", { skip: missing !== null }, async (t) => {
  const { page, errors, close } = await openConsole();
  await signIn(page, SERVICE_KEY, "admin");
  await page.getByRole("link", { name: "acme", exact: true }).click();
  for (const id of ["deactivate", "rotate"]) {
    await page.getByTestId(id).focus();
    await page.keyboard.press("Enter");
    await page.locator("dialog").waitFor();
    await page.keyboard.press("Escape");
    await page.locator("dialog").waitFor({ state: "detached" });
    t.equal(
      await page.evaluate(() => document.activeElement?.dataset.testid ?? document.activeElement?.tagName),
      id,
      `Escape on the ${id} dialog: focus on its button`,
    );
  }
  t.deepEqual(errors, [], "no script error");
  await close();
});

test("tear-down", { skip: missing !== null }, async (t) => {
  await browser.close();
  await gw.close();
  await engine.close();
  await rm(dir, { recursive: true, force: true });
  t.pass("stopped");
});

if (missing) {
  test("console edge browser checks", (t) => {
    if (process.env.CI) t.fail(missing);
    else t.skip(missing);
    t.end();
  });
}
