// The appliance with its home on a small tmpfs of the test's own (test/faults/deps.ts) that
// fills up: issuance is answered 507 storage_full with Retry-After (no receipt, no serial used),
// verification and /health go on, and once space is freed the chain goes on from the last
// receipt issued, in this process and after a restart. Skipped with a sentence where a tmpfs
// cannot be mounted.
import test from "tape";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { receiptHash } from "../../server/provenance/receipt.js";
import { fillDisk, mountSmallDisk, type SmallDisk } from "../faults/deps.js";
import { get, post, sampleArtifact, startApp, type TestApp } from "./helpers.js";

const mounted = await mountSmallDisk(2);
if ("skip" in mounted) {
  test("the appliance on a full disk", (t) => {
    t.comment(`skipped: ${mounted.skip}`);
    t.skip(mounted.skip);
    t.end();
  });
} else {
  const disk: SmallDisk = mounted;
  for (const worker of [false, true]) {
    test(`a full disk: 507 for issuance, nothing lost, the chain goes on once space is freed (${worker ? "receipt worker" : "in-process signing"})`, async (t) => {
      const dir = join(disk.dir, worker ? "w" : "p");
      let app: TestApp = await startApp(dir, { worker });
      const issue = (claims: Record<string, unknown>) => post(`${app.url}/v1/provenance/exact`, { artifact: sampleArtifact, claims }, app.adminKey);
      try {
        const acked: any[] = [];
        const first = await issue({ i: 0 });
        t.equal(first.status, 201, "issued before the disk fills");
        acked.push(first.json);
        const filler = join(disk.dir, `fill-${worker ? "w" : "p"}`);
        t.equal(await fillDisk(filler), "ENOSPC", "the disk is full");
        // the chain log's last page may still take some lines: issue until the disk answers
        let refused: Awaited<ReturnType<typeof issue>> | null = null;
        for (let i = 1; i <= 5000 && refused === null; i++) {
          const r = await issue({ i });
          if (r.status === 201) acked.push(r.json);
          else refused = r;
        }
        t.ok(refused, `refused once the disk is full (${acked.length} issued before)`);
        t.equal(refused?.status, 507, "507");
        t.equal(refused?.json?.code, "storage_full", "code storage_full");
        t.equal(refused?.json?.detail, "The receipt chain has no disk space left, so no receipt was issued; retry after space is freed.", "one sentence");
        t.equal(refused?.headers.get("retry-after"), "30", "Retry-After: 30");
        // several at once while full: each a 507, or a 503 to retry when built on a write that failed
        const burst = await Promise.all(Array.from({ length: 8 }, (_, i) => issue({ burst: i })));
        t.deepEqual(
          burst.filter((r) => !(r.status === 507 && r.json.code === "storage_full") && !(r.status === 503 && r.json.code === "store_unavailable")),
          [],
          "a burst while full: every answer 507 storage_full or 503 store_unavailable, none 500 or 201",
        );
        t.ok(
          burst.every((r) => r.headers.get("retry-after") !== null),
          "each with Retry-After",
        );
        const verify = await post(`${app.url}/v1/provenance/verify`, { receipt: acked.at(-1) });
        t.equal(verify.json?.verdict, "valid", "verification goes on while the disk is full");
        t.equal((await get(`${app.url}/health`)).status, 200, "/health answers 200");
        t.notOk(
          app.logs.some((l) => l.includes('"internal error"')),
          "no internal error was logged",
        );

        await rm(filler);
        const next = await issue({ after: "freed" });
        t.equal(next.status, 201, "issued again once space is freed, without a restart");
        const last = acked.at(-1);
        t.equal(next.json.serial, last.serial + 1, `serial ${last.serial + 1}: no serial was used by the refused requests`);
        t.equal(next.json.previous_receipt_sha256, receiptHash(last), "chained to the last receipt issued");
        acked.push(next.json);

        await app.close();
        app = await startApp(dir, { worker, adminKey: app.adminKey });
        const restarted = await issue({ after: "restart" });
        t.equal(restarted.status, 201, "issued after a restart");
        t.equal(restarted.json.serial, next.json.serial + 1, "the serial follows");
        t.equal(restarted.json.previous_receipt_sha256, receiptHash(next.json), "and chains to the last receipt");
        const serials = acked.map((r) => r.serial);
        t.deepEqual(
          serials,
          serials.map((_, i) => i + 1),
          "the receipts issued hold serials 1, 2, 3, ... with none skipped",
        );
      } finally {
        await app.close();
      }
    });
  }
  test("the small disk is unmounted", async (t) => {
    await disk.destroy();
    t.pass("unmounted");
  });
}
