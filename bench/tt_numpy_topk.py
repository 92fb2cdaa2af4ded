# Reference for bench/tt.ts topk: single-threaded numpy matmul of the dense entries (rows of a
# raw float32 file, count x size) with a dense query, best and median of `reps`; prints one JSON
# line with the times and the top-k row indices by score.
# Usage: python3 bench/tt_numpy_topk.py ENTRIES QUERY COUNT K REPS
import json, sys, time
import numpy as np

path, qpath, count, k, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
m = np.fromfile(path, dtype=np.float32).reshape(count, -1)
q = np.fromfile(qpath, dtype=np.float32)
times = []
for _ in range(reps):
    t0 = time.perf_counter()
    s = m @ q
    top = np.argsort(-s)[:k]
    times.append(time.perf_counter() - t0)
times.sort()
print(json.dumps({"best_s": times[0], "median_s": times[len(times) // 2], "top": [int(i) for i in top]}))
