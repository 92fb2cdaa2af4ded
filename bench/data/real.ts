// The real data sets the codec benchmarks share, loaded at run time from Debian packages through
// python3 (never dependencies of the product): the `camera` and `moon` photographs of
// python3-skimage (uint8), the Colin27 T1 MRI template of mricron-data (uint8) and the USGS
// elevation model of the Jacksboro fault (Tennessee, 3 arc-seconds, int16 metres) of
// python-matplotlib-data. Each is written as .npy in its own dtype, or cast to float32.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { readNpy } from "../../lib/npy.js";

/** The first python3 that imports the module, or null. Debian's own comes first: its packages live there. */
export function python(module: string): string | null {
  for (const py of ["/usr/bin/python3", "python3"]) {
    const r = spawnSync(py, ["-c", `import ${module}`], { stdio: "ignore" });
    if (r.status === 0) return py;
  }
  return null;
}

const MRI = "/usr/share/mricron/templates/ch2.nii.gz";
const DEM = "/usr/share/matplotlib/mpl-data/sample_data/jacksboro_fault_dem.npz";

interface Source {
  /** The name the benchmarks print. */
  label: string;
  module: string;
  /** A file the data come from, with the package that ships it. */
  file?: { path: string; hint: string };
  /** python3 code that binds `a`, the array in its own dtype. */
  code: string;
}

export const REAL: Record<string, Source> = {
  camera: { label: "camera", module: "skimage", code: "import skimage.data as d\na = d.camera()" },
  moon: { label: "moon", module: "skimage", code: "import skimage.data as d\na = d.moon()" },
  mri: {
    label: "mri (T1, Colin27)",
    module: "numpy",
    file: { path: MRI, hint: "apt-get install mricron-data, the Colin27 T1 template" },
    code: `import gzip
b = gzip.open("${MRI}").read()
dims = numpy.frombuffer(b[40:56], dtype="<i2")
dt = int(numpy.frombuffer(b[70:72], dtype="<i2")[0])
off = int(numpy.frombuffer(b[108:112], dtype="<f4")[0])
types = {2: "u1", 4: "<i2", 16: "<f4", 512: "<u2"}
shape = tuple(int(v) for v in dims[1:1 + dims[0]])
n = int(numpy.prod(shape))
a = numpy.frombuffer(b[off:off + n * numpy.dtype(types[dt]).itemsize], dtype=types[dt]).reshape(shape[::-1])`,
  },
  dem: {
    label: "dem (USGS, Jacksboro fault)",
    module: "numpy",
    file: { path: DEM, hint: "apt-get install python-matplotlib-data, the USGS Jacksboro fault DEM" },
    code: `a = numpy.load("${DEM}")["elevation"]`,
  },
};

/**
 * Data set `name` of REAL as an array read from .npy (in `dir`), in its own dtype or cast to
 * float32; or the sentence why it is skipped.
 */
export function loadReal(name: string, dir: string, asFloat32: boolean): ReturnType<typeof readNpy> | { skipped: string } {
  const src = REAL[name]!;
  if (src.file && !existsSync(src.file.path)) return { skipped: `${src.file.path} is absent (Debian: ${src.file.hint}).` };
  const py = python(src.module);
  if (!py)
    return {
      skipped: `${src.module} is not installed for python3 (Debian: apt-get install ${src.module === "skimage" ? "python3-skimage" : "python3-numpy"}).`,
    };
  const file = join(dir, `${name}${asFloat32 ? "-f32" : ""}.npy`);
  const code = `import sys, numpy\n${src.code}\nnumpy.save(sys.argv[1], ${asFloat32 ? "numpy.asarray(a, dtype=numpy.float32)" : "numpy.ascontiguousarray(a)"})`;
  const r = spawnSync(py, ["-c", code, file], { encoding: "utf8" });
  if (r.status !== 0 || !existsSync(file)) return { skipped: `could not load it: ${(r.stderr || "").trim().split("\n").pop()}` };
  return readNpy(readFileSync(file));
}
