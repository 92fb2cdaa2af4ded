// A small persistent thread pool: parallel_for splits n tasks across the workers and
// the calling thread. Several callers (libuv workers) may share it at once.
#pragma once
#include <cstddef>
#include <functional>

namespace svc {

// Number of threads used for parallel work (SVC_TT_THREADS or hardware_concurrency).
int pool_threads();

// Runs fn(i) for i in [0, n); returns when all are done. Nested calls run serially.
void parallel_for(size_t n, const std::function<void(size_t)>& fn);

}  // namespace svc
