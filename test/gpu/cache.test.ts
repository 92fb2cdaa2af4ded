// The GPU residency cache's accounting and eviction, on the in-memory device allocator.
import test from "tape";
import { GpuUnavailableError } from "../../lib/errors.js";
import { DeviceOutOfMemoryError, GpuCache, MemoryDeviceAllocator, deviceBytesOf, type EntryId } from "../../lib/store/gpu-cache.js";
import type { TT } from "../../lib/store/ttapi.js";

// A TT with one core of n float32 numbers: deviceBytesOf = 4n + 32.
const ttOf = (n: number, fill = 1): TT => ({ modes: [n], ranks: [1, 1], cores: [new Float32Array(n).fill(fill)] });
const id = (key: string, version = 1, tenant = "t1", ns = "ns"): EntryId => ({ tenant, ns, key, version });
const SIZE = deviceBytesOf(ttOf(100)); // 432

test("gpu cache: a miss loads, a hit does not, bytes_on_device counts each entry once", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 20);
  const cache = new GpuCache(dev, 10 * SIZE);
  let loads = 0;
  const src = () => {
    loads++;
    return ttOf(100, 3);
  };
  const a = await cache.acquire(id("a"), src);
  t.equal(a.hit, false, "first acquire is a miss");
  t.equal(a.bytes, SIZE, "lease carries the entry's device bytes");
  t.deepEqual(Array.from(dev.get(a.handle).cores[0]!.slice(0, 2)), [3, 3], "the device holds the cores");
  a.release();
  const b = await cache.acquire(id("a"), src);
  t.equal(b.hit, true, "second acquire is a hit");
  t.equal(b.handle, a.handle, "same device handle");
  b.release();
  t.equal(loads, 1, "the source was read once");
  const s = cache.stats();
  t.equal(s.bytes_on_device, SIZE, "bytes_on_device");
  t.equal(s.entries, 1, "one entry");
  t.equal(s.hits, 1, "one hit");
  t.equal(s.misses, 1, "one miss");
  t.equal(dev.usedBytes, SIZE, "the device's own count agrees");
});

test("gpu cache: (tenant, namespace, key, version) are all part of the identity", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 20);
  const cache = new GpuCache(dev, 10 * SIZE);
  for (const e of [id("a"), id("a", 2), id("a", 1, "t2"), id("a", 1, "t1", "other")]) (await cache.acquire(e, () => ttOf(100))).release();
  t.equal(cache.stats().entries, 4, "four distinct entries");
  t.equal(cache.stats().misses, 4, "four loads");
  t.equal(dev.live, 4, "four device allocations");
});

test("gpu cache: evicts least recently used entries until the new one fits", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 20);
  const cache = new GpuCache(dev, 3 * SIZE);
  for (const k of ["a", "b", "c"]) (await cache.acquire(id(k), () => ttOf(100))).release();
  (await cache.acquire(id("a"), () => ttOf(100))).release(); // a is now the most recent
  (await cache.acquire(id("d"), () => ttOf(100))).release();
  t.equal(cache.has(id("b")), false, "b (least recently used) was evicted");
  t.ok(cache.has(id("a")) && cache.has(id("c")) && cache.has(id("d")), "a, c and d stay");
  t.equal(cache.stats().evictions, 1, "one eviction");
  // an entry twice the size evicts two
  (await cache.acquire(id("big"), () => ttOf(208))).release(); // 4*208+32 = 864 = 2*SIZE
  t.equal(cache.stats().evictions, 3, "two more evictions for a double-size entry");
  t.ok(cache.has(id("big")) && cache.has(id("d")), "big and the most recent other entry stay");
  t.equal(cache.stats().bytes_on_device, 3 * SIZE, "exactly at the budget");
  t.equal(dev.usedBytes, 3 * SIZE, "device count agrees after evictions");
});

test("gpu cache: an entry larger than the whole budget is refused and nothing is evicted", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 20);
  const cache = new GpuCache(dev, 2 * SIZE);
  (await cache.acquire(id("a"), () => ttOf(100))).release();
  try {
    await cache.acquire(id("huge"), () => ttOf(1000));
    t.fail("should throw");
  } catch (e) {
    t.ok(e instanceof GpuUnavailableError, "GpuUnavailableError");
    t.match((e as Error).message, /needs 4032 bytes on the device, more than the GPU cache budget of 864 bytes/, "the message names both sizes");
  }
  t.ok(cache.has(id("a")), "the resident entry was kept");
  t.equal(cache.stats().evictions, 0, "no eviction");
  t.equal(cache.stats().bytes_on_device, SIZE, "accounting unchanged");
});

test("gpu cache: pinned entries are not evicted; a full cache of pinned entries refuses, release lets it go", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 20);
  const cache = new GpuCache(dev, 2 * SIZE);
  const a = await cache.acquire(id("a"), () => ttOf(100));
  const b = await cache.acquire(id("b"), () => ttOf(100));
  try {
    await cache.acquire(id("c"), () => ttOf(100));
    t.fail("should throw");
  } catch (e) {
    t.ok(e instanceof GpuUnavailableError, "GpuUnavailableError while everything is pinned");
    t.match((e as Error).message, /held by entries in use/, "says why");
  }
  t.equal(cache.stats().pinned, 2, "two pinned");
  t.equal(dev.live, 2, "nothing freed under a pin");
  a.release();
  a.release(); // idempotent: must not unpin twice
  const c = await cache.acquire(id("c"), () => ttOf(100));
  t.equal(cache.has(id("a")), false, "a evicted once released");
  t.equal(cache.has(id("b")), true, "b still pinned and resident");
  b.release();
  c.release();
  t.equal(cache.stats().pinned, 0, "no pins left");
  t.equal(cache.clear(), 2 * SIZE, "clear frees every unpinned byte");
  t.equal(dev.usedBytes, 0, "device empty");
  t.equal(cache.stats().bytes_on_device, 0, "accounting empty");
});

test("gpu cache: a double pin needs two releases", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 20);
  const cache = new GpuCache(dev, SIZE);
  const a1 = await cache.acquire(id("a"), () => ttOf(100));
  const a2 = await cache.acquire(id("a"), () => ttOf(100));
  a1.release();
  await cache
    .acquire(id("b"), () => ttOf(100))
    .then(
      () => t.fail("a is still pinned by a2"),
      (e) => t.ok(e instanceof GpuUnavailableError, "refused while a2 holds a"),
    );
  a2.release();
  const b = await cache.acquire(id("b"), () => ttOf(100));
  t.equal(cache.has(id("a")), false, "a evicted after the last release");
  b.release();
});

test("gpu cache: device out-of-memory below the budget evicts and retries, then gives up cleanly", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 20);
  const cache = new GpuCache(dev, 10 * SIZE);
  for (const k of ["a", "b"]) (await cache.acquire(id(k), () => ttOf(100))).release();
  dev.failNext = 1;
  const c = await cache.acquire(id("c"), () => ttOf(100));
  t.equal(cache.has(id("a")), false, "one LRU entry evicted to make room on the device");
  t.ok(cache.has(id("b")) && cache.has(id("c")), "b and c resident");
  c.release();
  dev.failNext = 10;
  try {
    await cache.acquire(id("d"), () => ttOf(100));
    t.fail("should throw");
  } catch (e) {
    t.ok(e instanceof GpuUnavailableError, "GpuUnavailableError when the device stays full");
    t.match((e as Error).message, /out of memory/, "says the device is out of memory");
  }
  t.equal(cache.has(id("d")), false, "no half-loaded entry is left");
  t.equal(cache.stats().bytes_on_device, dev.usedBytes, "cache and device agree after the failure");
  t.equal(cache.stats().entries, 0, "everything unpinned was evicted while retrying");
});

test("gpu cache: concurrent acquires of one entry load it once", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 20);
  const cache = new GpuCache(dev, 4 * SIZE);
  let loads = 0;
  const leases = await Promise.all(
    [1, 2, 3].map(() =>
      cache.acquire(id("a"), async () => {
        loads++;
        await new Promise((r) => setTimeout(r, 5));
        return ttOf(100);
      }),
    ),
  );
  t.equal(new Set(leases.map((l) => l.handle)).size, 1, "one handle");
  t.equal(dev.live, 1, "one device allocation");
  t.equal(cache.stats().bytes_on_device, SIZE, "counted once");
  t.equal(cache.stats().pinned, 1, "one pinned entry");
  leases.forEach((l) => l.release());
  t.ok(loads >= 1, "source read");
});

test("gpu cache: a failing source or a non-OOM device error leaves no entry behind", async (t) => {
  const dev = new MemoryDeviceAllocator(1 << 20);
  const cache = new GpuCache(dev, 4 * SIZE);
  await cache
    .acquire(id("a"), () => {
      throw new Error("payload missing");
    })
    .then(
      () => t.fail("should throw"),
      (e) => t.equal((e as Error).message, "payload missing", "source error passes through"),
    );
  const broken = {
    device: "x",
    bytesFor: () => SIZE,
    load: async () => {
      throw new Error("launch failed");
    },
    free: () => t.fail("free of an entry never loaded"),
  };
  const c2 = new GpuCache(broken, 4 * SIZE);
  await c2
    .acquire(id("a"), () => ttOf(100))
    .then(
      () => t.fail("should throw"),
      (e) => t.equal((e as Error).message, "launch failed", "device error passes through"),
    );
  t.equal(c2.stats().bytes_on_device, 0, "reservation returned");
  t.equal(c2.stats().entries, 0, "no entry");
  t.equal(cache.stats().entries, 0, "no entry in the first cache either");
});

test("gpu cache: budget must be a whole non-negative number; the memory device enforces its capacity", async (t) => {
  const dev = new MemoryDeviceAllocator(SIZE);
  t.throws(() => new GpuCache(dev, -1), /budget/, "negative budget refused");
  t.throws(() => new GpuCache(dev, 1.5), /budget/, "fractional budget refused");
  await dev.load(ttOf(100));
  await dev.load(ttOf(100)).then(
    () => t.fail("should throw"),
    (e) => t.ok(e instanceof DeviceOutOfMemoryError, "capacity enforced"),
  );
  t.throws(() => dev.free(999), /never allocated/, "freeing an unknown handle is an error");
});
