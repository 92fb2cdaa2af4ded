# Reference TT-SVD for bench/tt.ts: numpy's gesdd (np.linalg.svd) per unfolding, the delta rule
# of Oseledets' TT-SVD, same modes and tolerance as the engine. Reads one raw little-endian
# array (float32 or float64) and prints one JSON line: best and median seconds of `reps`
# calls, the ranks, and the relative error measured in float64.
# Usage: python3 bench/tt_numpy.py FILE DTYPE MODES(comma) TOL REPS
import json, sys, time
import numpy as np

def tt_svd(a, modes, tol):
    d = len(modes)
    delta = tol * np.linalg.norm(a.ravel().astype(np.float64)) / np.sqrt(max(d - 1, 1))
    cores, r, c = [], 1, a
    for k in range(d - 1):
        c = c.reshape(r * modes[k], -1)
        u, s, vt = np.linalg.svd(c, full_matrices=False)
        tail = np.cumsum((s[::-1].astype(np.float64)) ** 2)
        cut = int(np.searchsorted(tail, delta * delta, side="right"))
        rk = max(1, len(s) - cut)
        cores.append(u[:, :rk].reshape(r, modes[k], rk))
        c = s[:rk, None] * vt[:rk]
        r = rk
    cores.append(c.reshape(r, modes[-1], 1))
    return cores

def full(cores):
    x = cores[0].reshape(-1, cores[0].shape[-1])
    for g in cores[1:]:
        x = (x @ g.reshape(g.shape[0], -1)).reshape(-1, g.shape[-1])
    return x.ravel()

def main():
    path, dtype, modes, tol, reps = sys.argv[1], sys.argv[2], [int(m) for m in sys.argv[3].split(",")], float(sys.argv[4]), int(sys.argv[5])
    a = np.fromfile(path, dtype=np.float32 if dtype == "float32" else np.float64)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        cores = tt_svd(a, modes, tol)
        times.append(time.perf_counter() - t0)
    a64 = a.astype(np.float64)
    err = float(np.linalg.norm(full([g.astype(np.float64) for g in cores]) - a64) / np.linalg.norm(a64))
    times.sort()
    info = {}
    try:
        from threadpoolctl import threadpool_info
        info = {p.get("internal_api"): p.get("num_threads") for p in threadpool_info()}
    except Exception:
        pass
    print(json.dumps({"best_s": times[0], "median_s": times[len(times) // 2], "ranks": [1] + [g.shape[-1] for g in cores], "relative_error": err, "blas": info}))

main()
