// The GPU side of the TT engine as plain C++ (no N-API): entries loaded to device memory are
// named by handles; every call throws TTError with code "gpu_unavailable" (no device, or CUDA
// not compiled in), "out_of_memory" (the device is full), "bad_request" or "internal".
// CUDA builds implement it in native/cuda/*.cu, CPU-only builds in native/device_none.cc.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tt.h"

namespace svc {
namespace gpu {

struct Loaded {
  uint64_t handle = 0;
  size_t bytes = 0;  // device bytes held by the entry
  double h2d_s = 0;  // seconds of the host-to-device copy (from pinned staging), by CUDA events
};

// Device bytes of an entry: a 16*(d+1)-byte header (ranks) plus the float32 cores.
size_t bytes_for(const std::vector<size_t>& modes, const std::vector<size_t>& ranks);

// Copies float32 cores (C order [r_prev][n_k][r_next]) into one device allocation.
Loaded load(const std::vector<const float*>& cores, const std::vector<size_t>& modes, const std::vector<size_t>& ranks);

// Forgets a handle; its memory is freed once no call in flight uses it. Unknown handles: false.
bool release(uint64_t handle);

// Dense block (or whole tensor when ranges is empty) as float32, like tt_reconstruct. On the
// device only when every dense dimension is one TT mode or the block is the whole tensor.
Buffer reconstruct(uint64_t handle, const std::vector<size_t>& shape, const std::vector<size_t>& groups,
                   const std::vector<std::pair<size_t, size_t>>& ranges);

// Seconds per whole-tensor reconstruction kept on the device (CUDA events, mean of repeats).
double reconstruct_timed(uint64_t handle, size_t repeats);

// <a, b> of two resident entries with the same modes (float64 accumulation).
double dot(uint64_t a, uint64_t b);

// <entry, x> for a dense float32 x of the entry's size.
double dot_dense(uint64_t handle, const float* x, size_t n);

// Scores of one resident query against resident candidates with the query's modes, then the
// k best by metric ("dot", "cosine": highest first; "l2": lowest first). norms: [query, cands...]
// (needed for cosine and l2). Writes up to k (index into cands, score) pairs; returns how many.
size_t topk(uint64_t query, const std::vector<uint64_t>& cands, const std::vector<double>& norms,
            const std::string& metric, size_t k, uint32_t* index, double* score);

// Free and total device memory in bytes; throws gpu_unavailable without a device.
std::pair<size_t, size_t> memory();

}  // namespace gpu
}  // namespace svc

namespace Napi {
class Env;
class Object;
}  // namespace Napi

namespace svc {
// Adds the gpu* functions of native/gpu.cc to the addon's exports.
void register_gpu(Napi::Env env, Napi::Object exports);
}  // namespace svc
