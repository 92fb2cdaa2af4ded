// The local usage store's journal: every charge is appended before add() resolves, so a store
// that is never closed (a process killed) is rebuilt exactly from its snapshot and journals;
// a snapshot names the journal it does not contain, and older journals are deleted; snapshots
// that cannot be written start no further journal.
import test from "tape";
import { mkdtemp, mkdir, readdir, readFile, rm, appendFile, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalFileUsageStore } from "../../server/gateway/meter.js";
import { waitFor } from "../faults/deps.js";

test("charges acknowledged by add() survive a store that is never closed", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-journal-"));
  // A long snapshot interval: everything after the opening snapshot lives only in the journal.
  const s = await LocalFileUsageStore.open(dir, 3_600_000);
  await Promise.all(Array.from({ length: 250 }, (_, i) => s.add("acme", "2026-01", i % 2 ? "get" : "put", i % 2 ? 100 : 1000)));
  await s.add("beta", "2026-02", "search", 500);
  const snap = JSON.parse(await readFile(join(dir, "usage.json"), "utf8"));
  t.deepEqual(snap.usage, {}, "the snapshot on disk predates the charges");
  // No close(): as after kill -9. A second store opens the same directory.
  const again = await LocalFileUsageStore.open(dir, 3_600_000);
  t.equal(await again.total("acme", "2026-01"), 125 * 1000 + 125 * 100, "every charge of acme is back");
  t.deepEqual((await again.get("acme", "2026-01")).breakdown_milli, { put: 125_000, get: 12_500 }, "with its breakdown");
  t.equal(await again.total("beta", "2026-02"), 500, "and beta's");
  await again.close();
  const files = (await readdir(dir)).filter((f) => f.startsWith("usage.journal."));
  t.equal(files.length, 1, `one journal left after a clean close (${files.join(", ")})`);
  const third = await LocalFileUsageStore.open(dir, 3_600_000);
  t.equal(await third.total("acme", "2026-01"), 137_500, "reopened after a clean close: nothing counted twice");
  await third.close();
  void s;
  await rm(dir, { recursive: true, force: true });
});

test("a journal with a torn or hostile line: the valid charges are replayed, the rest skipped", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-journal-"));
  const s = await LocalFileUsageStore.open(dir, 3_600_000);
  await s.add("acme", "2026-01", "put", 1000);
  const journal = (await readdir(dir)).find((f) => f.startsWith("usage.journal."))!;
  await appendFile(
    join(dir, journal),
    '{"p":"2026-01","t":"acme","o":"put","m":-5}\n{"p":"2026-01","t":"acme","o":"nope","m":5}\n{"p":"2026-01","t":"acme","o":"get","m":1e400}\n{"p":"2026-01","t":"acme","o":"g',
  );
  await s.add("acme", "2026-01", "get", 100);
  const again = await LocalFileUsageStore.open(dir, 3_600_000);
  t.equal(await again.total("acme", "2026-01"), 1100, "the two real charges, nothing else");
  await again.close();
  await rm(dir, { recursive: true, force: true });
});

test("a charge whose journal line cannot be written (a full disk) is taken back: usage agrees with the 0 CUs answered", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-journal-"));
  const s = await LocalFileUsageStore.open(dir, 3_600_000);
  await s.add("acme", "2026-01", "put", 1000);
  // the next journal is /dev/full, where every write fails with ENOSPC, as on a full disk
  const ids = (await readdir(dir)).map((f) => Number(/^usage\.journal\.(\d+)$/.exec(f)?.[1] ?? -1));
  const next = Math.max(...ids) + 1;
  await symlink("/dev/full", join(dir, `usage.journal.${next}`));
  await s.flush();
  const failed = await Promise.allSettled([s.add("acme", "2026-01", "put", 1000), s.add("acme", "2026-01", "get", 100), s.add("beta", "2026-01", "get", 100)]);
  t.deepEqual(
    failed.map((r) => r.status),
    ["rejected", "rejected", "rejected"],
    "every charge of the failed write is refused to its caller",
  );
  t.equal(((failed[0] as PromiseRejectedResult).reason as NodeJS.ErrnoException).code, "ENOSPC", "with the disk's error");
  t.equal(await s.total("acme", "2026-01"), 1000, "acme's usage holds only the charge that was written");
  t.equal(await s.total("beta", "2026-01"), 0, "beta's holds none");
  // space again: the snapshot and a reopened store agree
  await rm(join(dir, `usage.journal.${next}`));
  await s.close();
  const again = await LocalFileUsageStore.open(dir, 3_600_000);
  t.equal(await again.total("acme", "2026-01"), 1000, "after a restart: the same");
  t.equal(await again.total("beta", "2026-01"), 0, "and beta still 0");
  await again.close();
  const tmp = (await readdir(dir)).filter((f) => f.endsWith(".tmp"));
  t.deepEqual(tmp, [], "no temp file is left behind");
  await rm(dir, { recursive: true, force: true });
});

const journalsIn = async (dir: string) => (await readdir(dir)).filter((f) => /^usage\.journal\.\d+$/.test(f)).sort();

test("snapshots that cannot be written start no journal after the first; the first that can deletes the older ones", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-journal-"));
  const told: string[] = [];
  const s = await LocalFileUsageStore.open(dir, 10, {
    retryMaxMs: 50,
    onSnapshot: (c) => told.push(c.written ? "written again" : `failing (${(c.error as NodeJS.ErrnoException).code})`),
  });
  let charged = 0;
  const charge = async (n: number) => {
    await Promise.all(Array.from({ length: n }, () => s.add("acme", "2026-01", "get", 100)));
    charged += n * 100;
  };
  // usage.json becomes a directory: renaming a snapshot onto it fails, as writing one on a full
  // disk does (before any charge, so that no snapshot is due in between)
  await rm(join(dir, "usage.json"));
  await mkdir(join(dir, "usage.json"));
  await writeFile(join(dir, "usage.json", "x"), "");
  const outcomes: string[] = [];
  for (let i = 0; i < 20; i++) {
    await charge(5);
    outcomes.push(
      await s.flush().then(
        () => "written",
        () => "failed",
      ),
    );
  }
  t.deepEqual([...new Set(outcomes)], ["failed"], "20 snapshots in a row fail");
  // and charges go on with the store's own timer (10 ms), for at least 50 of its intervals
  const until = Date.now() + 500;
  while (Date.now() < until) {
    await charge(3);
    await new Promise((r) => setTimeout(r, 2));
  }
  const during = await journalsIn(dir);
  t.ok(during.length <= 2, `at most two journals while snapshots fail (${during.join(", ")})`);
  // the snapshot can be written again: the store's next attempt needs no new charge
  await rm(join(dir, "usage.json"), { recursive: true });
  let seen = "";
  const settled = await waitFor(
    "a snapshot names the only journal left",
    async () => {
      const files = await journalsIn(dir);
      const snap = JSON.parse(await readFile(join(dir, "usage.json"), "utf8"));
      seen = `${files.join(", ")}; the snapshot names ${snap.journal} and holds ${snap.usage["2026-01"]?.acme?._total}`;
      return files.length === 1 && files[0] === `usage.journal.${snap.journal}` && snap.usage["2026-01"]?.acme?._total === charged;
    },
    60_000,
  ).then(
    () => true,
    () => false,
  );
  t.ok(settled, `once it can be written: a current snapshot (${charged}) and only the journal it names (${seen})`);
  t.deepEqual(told, ["failing (EISDIR)", "written again"], "the store told of the failing snapshots once, and once of the recovery");
  t.deepEqual(
    (await readdir(dir)).filter((f) => f.endsWith(".tmp")),
    [],
    "no temp file left",
  );
  // as after kill -9, then after a clean close
  const again = await LocalFileUsageStore.open(dir, 3_600_000);
  t.equal(await again.total("acme", "2026-01"), charged, `after a restart: every charge once (${charged} milli-CUs)`);
  await again.close();
  const third = await LocalFileUsageStore.open(dir, 3_600_000);
  t.equal(await third.total("acme", "2026-01"), charged, "and after a clean close");
  await third.close();
  t.equal((await journalsIn(dir)).length, 1, "one journal left");
  void s;
  await rm(dir, { recursive: true, force: true });
});
