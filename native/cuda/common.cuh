// Shared by the CUDA files: error checks, the resident-entry record and its registry, the
// per-call stream, and the one GEMM kernel that reconstruction is built from.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../gpu.h"

namespace svc {
namespace gpu {

[[noreturn]] void fail_cuda(cudaError_t err, const char* what);
inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail_cuda(err, what);
}

// One entry on the device: a header of int32 ranks (16*(d+1) bytes) then the float32 cores,
// in one allocation from the stream-ordered pool (freed with cudaFreeAsync).
struct DevTT {
  // first, beside the shared_ptr's control block: what a batch of inner products reads of
  // each of many candidates, so a candidate costs one cache line on the host
  void* base = nullptr;
  uint64_t modes_id = 0;  // equal for entries with equal modes (interned at load)
  size_t max_rank = 1;
  std::vector<size_t> modes, ranks, offsets;  // offsets of each core, in floats from cores()
  size_t bytes = 0;
  size_t header = 0;
  const int* d_ranks() const { return static_cast<const int*>(base); }
  const float* cores() const { return reinterpret_cast<const float*>(static_cast<const char*>(base) + header); }
  const float* core(size_t k) const { return cores() + offsets[k]; }
  size_t dense_size() const {
    size_t n = 1;
    for (size_t m : modes) n *= m;
    return n;
  }
  ~DevTT();
};

// Throws gpu_unavailable unless a device is usable (probed once), then selects device 0.
void ensure_device();
// The entry of a handle (kept alive while the caller holds it), or bad_request.
std::shared_ptr<DevTT> lookup(uint64_t handle, const char* field);
// The entries of many handles under one lock, in order, or bad_request for the first unknown one.
std::vector<std::shared_ptr<DevTT>> lookup_all(const std::vector<uint64_t>& handles, const char* field);

// A non-blocking stream for one call, synchronised and destroyed on scope exit.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() {
    if (s) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  }
  void sync() { check(cudaStreamSynchronize(s), "cudaStreamSynchronize"); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// Stream-ordered device scratch, freed on scope exit.
struct Scratch {
  void* p = nullptr;
  cudaStream_t s;
  Scratch(size_t bytes, cudaStream_t st) : s(st) {
    cudaError_t e = cudaMallocAsync(&p, bytes ? bytes : 1, s);
    if (e != cudaSuccess) fail_cuda(e, "cudaMallocAsync");
  }
  ~Scratch() {
    if (p) cudaFreeAsync(p, s);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// C[M x N] = A[M x K] * B[K x N], all row-major float32 with float64 accumulation.
void gemm(const float* A, const float* B, float* C, size_t M, size_t N, size_t K, cudaStream_t s);

// The whole tensor of a TT held as (cores, ranks, modes) on the device, written to out (C order).
void reconstruct_into(const std::vector<const float*>& cores, const std::vector<size_t>& modes,
                      const std::vector<size_t>& ranks, float* out, cudaStream_t s);

}  // namespace gpu
}  // namespace svc
