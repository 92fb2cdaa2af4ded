// The CUDA sources keep compiling where nvcc exists, even on a machine without a GPU whose
// addon is built CPU-only: every native/cuda/*.cu is compiled with nvcc as CMakeLists.txt does
// (C++17, sm_90). CMake's default follows the driver library (ON only with nvcc and libcuda),
// -DSVC_WITH_CUDA overrides it, and build-native's SVC_WITH_CUDA refuses a value it does not know.
import test from "tape";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = new URL("../..", import.meta.url).pathname;
const has = (cmd: string) => spawnSync(cmd, ["--version"], { stdio: "ignore" }).status === 0;
const nvcc = has("nvcc");
const cmake = has("cmake");

test("every native/cuda/*.cu compiles with nvcc (C++17, sm_90)", async (t) => {
  if (!nvcc) {
    t.skip("nvcc is not installed");
    t.end();
    return;
  }
  const dir = await mkdtemp(join(tmpdir(), "svc-cuda-"));
  try {
    const sources = readdirSync(join(root, "native", "cuda")).filter((f) => f.endsWith(".cu"));
    t.ok(sources.length >= 5, `${sources.length} CUDA sources`);
    for (const f of sources) {
      const out = join(dir, f.replace(/\.cu$/, ".o"));
      const r = spawnSync(
        "nvcc",
        ["-std=c++17", "-O3", "-arch=sm_90", "-Xcompiler", "-fPIC", "-DSVC_WITH_CUDA=1", "-c", join(root, "native", "cuda", f), "-o", out],
        { encoding: "utf8", timeout: 600_000 },
      );
      t.equal(r.status, 0, `${f} compiles${r.status === 0 ? "" : `: ${(r.stderr || String(r.error)).slice(0, 2000)}`}`);
      t.ok(existsSync(out) && statSync(out).size > 0, `${f}: an object file`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

/** SVC_WITH_CUDA as a configure-only CMake run in a fresh folder records it. */
async function configured(args: string[]): Promise<{ value: string | undefined; out: string }> {
  const dir = await mkdtemp(join(tmpdir(), "svc-cmake-"));
  try {
    const r = spawnSync("cmake", ["-S", root, "-B", dir, ...args], { encoding: "utf8", timeout: 600_000 });
    const cache = join(dir, "CMakeCache.txt");
    const value = existsSync(cache) ? /^SVC_WITH_CUDA:BOOL=(ON|OFF)$/m.exec(readFileSync(cache, "utf8"))?.[1] : undefined;
    return { value, out: r.stdout + r.stderr };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test("CMake's SVC_WITH_CUDA default: ON only with nvcc and the driver library; -D overrides it", async (t) => {
  if (!cmake) {
    t.skip("cmake is not installed");
    t.end();
    return;
  }
  const driver = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/lib/wsl/lib"].some(
    (d) => existsSync(join(d, "libcuda.so")) || existsSync(join(d, "libcuda.so.1")),
  );
  const dflt = await configured([]);
  t.equal(dflt.value, nvcc && driver ? "ON" : "OFF", `default ${dflt.value} (nvcc ${nvcc}, driver ${driver})`);
  if (nvcc && !driver) t.match(dflt.out, /nvcc found but no CUDA driver library \(libcuda\): building without CUDA/, "and says why");
  t.equal((await configured(["-DSVC_WITH_CUDA=OFF"])).value, "OFF", "-DSVC_WITH_CUDA=OFF");
  if (nvcc) t.equal((await configured(["-DSVC_WITH_CUDA=ON"])).value, "ON", "-DSVC_WITH_CUDA=ON with nvcc and no driver");
});

test("build-native: an SVC_WITH_CUDA it does not know stops it with a sentence, before any build", (t) => {
  for (const v of ["maybe", "2", "o n"]) {
    const r = spawnSync(process.execPath, [join(root, "scripts", "build-native.mjs")], {
      encoding: "utf8",
      env: { ...process.env, SVC_WITH_CUDA: v },
      timeout: 60_000,
    });
    t.deepEqual([r.status, r.stderr], [1, `svc-tensor: SVC_WITH_CUDA must be 1 or 0 (on/off), not '${v}'.\n`], `SVC_WITH_CUDA=${v}`);
  }
  t.end();
});
