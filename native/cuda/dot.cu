// TT x TT inner products on the device: one block per (query, candidate) pair carries the
// r_q x r_c interface matrix W through the modes in shared memory (float64), W <- sum_i
// A_i^T W B_i, reading the candidate's ranks from its resident header. dot() is a batch of one.
#include <algorithm>
#include <cmath>

#include "common.cuh"

namespace svc {
namespace gpu {

namespace {

constexpr int kThreads = 128;

__global__ void tt_dot_batch(const float* __restrict__ q, const int* __restrict__ qr,
                             const long long* __restrict__ qoff, const int* __restrict__ modes, int d,
                             const char* const* __restrict__ cands, int header, int maxr, double* __restrict__ out) {
  extern __shared__ double sh[];
  double* W = sh;
  double* M = W + maxr * maxr;
  double* Wn = M + maxr * maxr;
  const int tid = threadIdx.x, bs = blockDim.x;
  const char* base = cands[blockIdx.x];
  const int* cr = reinterpret_cast<const int*>(base);
  const float* cc = reinterpret_cast<const float*>(base + header);
  if (tid == 0) W[0] = 1.0;
  __syncthreads();
  long long coff = 0;
  for (int k = 0; k < d; ++k) {
    const int n = modes[k], qa = qr[k], qa1 = qr[k + 1], cb = cr[k], cb1 = cr[k + 1];
    const float* A = q + qoff[k];
    const float* B = cc + coff;
    for (int e = tid; e < qa1 * cb1; e += bs) Wn[e] = 0.0;
    for (int i = 0; i < n; ++i) {
      // M (qa x cb1) = W (qa x cb) * B_i (cb x cb1)
      for (int e = tid; e < qa * cb1; e += bs) {
        const int a = e / cb1, bp = e % cb1;
        double s = 0;
        for (int b = 0; b < cb; ++b) s += W[a * cb + b] * double(B[(size_t(b) * n + i) * cb1 + bp]);
        M[e] = s;
      }
      __syncthreads();
      // Wn (qa1 x cb1) += A_i^T (qa1 x qa) * M; each thread owns the same Wn entries every i
      for (int e = tid; e < qa1 * cb1; e += bs) {
        const int ap = e / cb1, bp = e % cb1;
        double s = 0;
        for (int a = 0; a < qa; ++a) s += double(A[(size_t(a) * n + i) * qa1 + ap]) * M[a * cb1 + bp];
        Wn[e] += s;
      }
      __syncthreads();
    }
    for (int e = tid; e < qa1 * cb1; e += bs) W[e] = Wn[e];
    __syncthreads();
    coff += (long long)cb * n * cb1;
  }
  if (tid == 0) out[blockIdx.x] = W[0];
}

}  // namespace

// Scores <query, cand_j> into host `out` (cands.size() doubles).
void dot_scores(uint64_t query, const std::vector<uint64_t>& cands, double* out) {
  ensure_device();
  auto qt = lookup(query, "query");
  std::vector<std::shared_ptr<DevTT>> cs;
  cs.reserve(cands.size());
  size_t maxr = 1;
  for (size_t r : qt->ranks) maxr = std::max(maxr, r);
  for (size_t j = 0; j < cands.size(); ++j) {
    cs.push_back(lookup(cands[j], "candidates"));
    if (cs.back()->modes != qt->modes)
      throw TTError("bad_request", "candidates",
                    "candidate " + std::to_string(j) + " has other TT modes than the query");
    for (size_t r : cs.back()->ranks) maxr = std::max(maxr, r);
  }
  if (cands.empty()) return;
  int dev = 0, optin = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "cudaDeviceGetAttribute");
  size_t smem = 3 * maxr * maxr * sizeof(double);
  if (smem > size_t(optin))
    throw TTError("bad_request", "ranks",
                  "TT ranks above " + std::to_string(size_t(std::sqrt(optin / 24.0))) +
                      " do not fit the device's shared memory for inner products");
  check(cudaFuncSetAttribute(tt_dot_batch, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
        "cudaFuncSetAttribute");
  size_t d = qt->modes.size();
  std::vector<int> qr(qt->ranks.begin(), qt->ranks.end()), modes(qt->modes.begin(), qt->modes.end());
  std::vector<long long> qoff(qt->offsets.begin(), qt->offsets.end());
  std::vector<const char*> ptrs;
  ptrs.reserve(cands.size());
  for (auto& c : cs) ptrs.push_back(static_cast<const char*>(c->base));
  Stream st;
  Scratch meta(4 * (d + 1) + 8 * d + 4 * d + 16, st.s);
  char* m = meta.as<char>();
  long long* d_qoff = reinterpret_cast<long long*>(m);
  int* d_qr = reinterpret_cast<int*>(m + 8 * d);
  int* d_modes = d_qr + (d + 1);
  check(cudaMemcpyAsync(d_qoff, qoff.data(), 8 * d, cudaMemcpyHostToDevice, st.s), "cudaMemcpyAsync");
  check(cudaMemcpyAsync(d_qr, qr.data(), 4 * (d + 1), cudaMemcpyHostToDevice, st.s), "cudaMemcpyAsync");
  check(cudaMemcpyAsync(d_modes, modes.data(), 4 * d, cudaMemcpyHostToDevice, st.s), "cudaMemcpyAsync");
  Scratch d_ptrs(sizeof(const char*) * ptrs.size(), st.s), d_out(sizeof(double) * ptrs.size(), st.s);
  check(cudaMemcpyAsync(d_ptrs.p, ptrs.data(), sizeof(const char*) * ptrs.size(), cudaMemcpyHostToDevice, st.s),
        "cudaMemcpyAsync");
  // one launch per 2^31-1 candidates at most (gridDim.x)
  for (size_t j0 = 0; j0 < ptrs.size(); j0 += 0x7fffffff) {
    size_t nb = std::min<size_t>(ptrs.size() - j0, 0x7fffffff);
    tt_dot_batch<<<unsigned(nb), kThreads, smem, st.s>>>(qt->cores(), d_qr, d_qoff, d_modes, int(d),
                                                         d_ptrs.as<const char*>() + j0, int(qt->header), int(maxr),
                                                         d_out.as<double>() + j0);
    check(cudaGetLastError(), "tt_dot_batch launch");
  }
  check(cudaMemcpyAsync(out, d_out.p, sizeof(double) * ptrs.size(), cudaMemcpyDeviceToHost, st.s), "cudaMemcpyAsync");
  st.sync();
}

double dot(uint64_t a, uint64_t b) {
  double s = 0;
  dot_scores(a, {b}, &s);
  return s;
}

}  // namespace gpu
}  // namespace svc
