// Reconstruction on the device: a TT is contracted as two chains of GEMMs meeting at the mode
// that keeps the intermediates smallest, L (P x r) * R (r x S), so the last GEMM writes the
// dense output once. A block of a TT whose dense dimensions are single modes is the TT of the
// sliced cores, so blocks use the same path. TT x dense reuses it and reduces on the device.
#include <algorithm>

#include "common.cuh"

namespace svc {
namespace gpu {

namespace {

constexpr int TILE = 64;  // output tile per block
constexpr int KT = 16;    // K per shared-memory step
constexpr int TPB = 16;   // threads per block side; each thread computes 4 x 4 outputs
constexpr int THREADS = TPB * TPB;

// Two forms, one per range of K (gemm() picks): T is the type the tiles are held in, MINB the
// blocks that must fit a multiprocessor. For K above one step (ranks above 16) the tiles are
// float64, each element converted once as it is loaded rather than by each of the 16 threads
// that multiply it, and at most 64 registers let four blocks share a multiprocessor to hide the
// tile loads; for K of one step, float32 tiles and no register bound were faster on an H100 and
// an H200 (docs/gpu.md). Both accumulate in float64 in the same order: the same results.
template <typename T, int MINB>
__global__ void __launch_bounds__(THREADS, MINB)
    gemm_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, size_t M, size_t N,
                size_t K, size_t gx) {
  __shared__ T As[KT][TILE + 1];
  __shared__ T Bs[KT][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;
  // a 1-D grid of tiles (either side of C may exceed the 65535 limit of gridDim.y)
  const size_t row0 = (blockIdx.x / gx) * TILE, col0 = (blockIdx.x % gx) * TILE;
  double acc[4][4] = {};
  for (size_t k0 = 0; k0 < K; k0 += KT) {
    for (int i = ty * TPB + tx; i < TILE * KT; i += TPB * TPB) {
      int r = i / KT, c = i % KT;  // A tile: TILE rows x KT columns
      size_t gr = row0 + r, gc = k0 + c;
      As[c][r] = (gr < M && gc < K) ? T(A[gr * K + gc]) : T(0);
      int br = i / TILE, bc = i % TILE;  // B tile: KT rows x TILE columns
      size_t hr = k0 + br, hc = col0 + bc;
      Bs[br][bc] = (hr < K && hc < N) ? T(B[hr * N + hc]) : T(0);
    }
    __syncthreads();
    // the last step of a K that is not a multiple of KT (a rank of 8: every step) skips the zero rows
    const int kmax = int(K - k0 < size_t(KT) ? K - k0 : size_t(KT));
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
      if (kk >= kmax) break;
      T a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[kk][ty + TPB * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx + TPB * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fma(double(a[i]), double(b[j]), acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    size_t r = row0 + ty + TPB * i;
    if (r >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      size_t c = col0 + tx + TPB * j;
      if (c < N) C[r * N + c] = float(acc[i][j]);
    }
  }
}

// sum of a[i] * b[i] in float64, one partial per block (then summed on the host)
__global__ void dot_partial(const float* __restrict__ a, const float* __restrict__ b, size_t n, double* partial) {
  __shared__ double sh[256];
  double s = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    s += double(a[i]) * double(b[i]);
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

size_t prod(const std::vector<size_t>& v, size_t a, size_t b) {
  size_t p = 1;
  for (size_t i = a; i < b; ++i) p *= v[i];
  return p;
}

}  // namespace

void gemm(const float* A, const float* B, float* C, size_t M, size_t N, size_t K, cudaStream_t s) {
  if (M == 0 || N == 0) return;
  size_t gx = (N + TILE - 1) / TILE, gy = (M + TILE - 1) / TILE;
  if (gx * gy > 0x7fffffffu) throw TTError("bad_request", "modes", "the tensor is too large for the device GEMM grid");
  const unsigned blocks = unsigned(gx * gy);
  if (K > size_t(KT)) {
    gemm_kernel<double, 4><<<blocks, dim3(TPB, TPB), 0, s>>>(A, B, C, M, N, K, gx);
  } else {
    gemm_kernel<float, 3><<<blocks, dim3(TPB, TPB), 0, s>>>(A, B, C, M, N, K, gx);
  }
  check(cudaGetLastError(), "gemm_kernel launch");
}

void reconstruct_into(const std::vector<const float*>& cores, const std::vector<size_t>& modes,
                      const std::vector<size_t>& r, float* out, cudaStream_t s) {
  size_t d = modes.size();
  if (d == 1) {
    check(cudaMemcpyAsync(out, cores[0], 4 * modes[0], cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
    return;
  }
  // split m (1..d-1): L holds modes [0, m) as P x r[m], R holds modes [m, d) as r[m] x S
  size_t best = 1, best_size = SIZE_MAX;
  for (size_t m = 1; m < d; ++m) {
    size_t big = 0;
    for (size_t k = 1; k < m; ++k) big = std::max(big, prod(modes, 0, k + 1) * r[k + 1]);
    for (size_t k = m; k + 1 < d; ++k) big = std::max(big, r[k] * prod(modes, k, d));
    big = std::max(big, std::max(prod(modes, 0, m) * r[m], r[m] * prod(modes, m, d)));
    if (big < best_size) best_size = big, best = m;
  }
  size_t m = best;
  Scratch l0(4 * best_size, s), l1(4 * best_size, s), r0(4 * best_size, s), r1(4 * best_size, s);
  // left chain: X_0 = G_0 (n_0 x r_1); X_k = X_{k-1} (P x r_k) * G_k (r_k x n_k r_{k+1})
  const float* L = cores[0];
  float* lb[2] = {l0.as<float>(), l1.as<float>()};
  for (size_t k = 1; k < m; ++k) {
    size_t P = prod(modes, 0, k);
    gemm(L, cores[k], lb[k & 1], P, modes[k] * r[k + 1], r[k], s);
    L = lb[k & 1];
  }
  // right chain: Y_{d-1} = G_{d-1} (r_{d-1} x n_{d-1}); Y_k = G_k (r_k n_k x r_{k+1}) * Y_{k+1}
  const float* R = cores[d - 1];
  float* rb[2] = {r0.as<float>(), r1.as<float>()};
  for (size_t k = d - 1; k-- > m;) {
    size_t S = prod(modes, k + 1, d);
    gemm(cores[k], R, rb[k & 1], r[k] * modes[k], S, r[k + 1], s);
    R = rb[k & 1];
  }
  gemm(L, R, out, prod(modes, 0, m), prod(modes, m, d), r[m], s);
}

Buffer reconstruct(uint64_t handle, const std::vector<size_t>& shape, const std::vector<size_t>& groups,
                   const std::vector<std::pair<size_t, size_t>>& ranges) {
  ensure_device();
  auto t = lookup(handle, "handle");
  size_t d = t->modes.size();
  if (groups.size() != shape.size())
    throw TTError("bad_request", "shape", "groups must have one entry per dense dimension");
  Stream st;
  std::vector<const float*> cores;
  std::vector<size_t> modes = t->modes;
  std::vector<std::unique_ptr<Scratch>> sliced;
  if (ranges.empty()) {
    for (size_t k = 0; k < d; ++k) cores.push_back(t->core(k));
  } else {
    // a block: only for dense dimensions that are single modes (the caller checks; backstop here)
    if (ranges.size() != shape.size() || shape.size() != d)
      throw TTError("bad_request", "slice", "device blocks need one TT mode per dense dimension");
    for (size_t k = 0; k < d; ++k) {
      size_t a = ranges[k].first, b = ranges[k].second;
      if (groups[k] != 1 || a >= b || b > t->modes[k] || shape[k] != t->modes[k])
        throw TTError("bad_request", "slice",
                      "device blocks need one TT mode per dense dimension and 0 <= start < stop <= size");
      size_t rp = t->ranks[k], rn = t->ranks[k + 1], n = t->modes[k];
      if (a == 0 && b == n) {
        cores.push_back(t->core(k));
        continue;
      }
      sliced.push_back(std::make_unique<Scratch>(4 * rp * (b - a) * rn, st.s));
      float* dst = sliced.back()->as<float>();
      // rows of the core viewed as r_prev x (n * r_next): keep columns [a * r_next, b * r_next)
      check(cudaMemcpy2DAsync(dst, 4 * (b - a) * rn, t->core(k) + a * rn, 4 * n * rn, 4 * (b - a) * rn, rp,
                              cudaMemcpyDeviceToDevice, st.s),
            "cudaMemcpy2DAsync");
      cores.push_back(dst);
      modes[k] = b - a;
    }
  }
  size_t n = prod(modes, 0, d);
  Scratch out(4 * n, st.s);
  reconstruct_into(cores, modes, t->ranks, out.as<float>(), st.s);
  Buffer host = alloc_buffer(std::max<size_t>(n, 1), 4);
  host.bytes = 4 * n;
  check(cudaMemcpyAsync(host.p, out.p, 4 * n, cudaMemcpyDeviceToHost, st.s), "cudaMemcpyAsync");
  st.sync();
  return host;
}

double reconstruct_timed(uint64_t handle, size_t repeats) {
  ensure_device();
  auto t = lookup(handle, "handle");
  size_t d = t->modes.size();
  std::vector<const float*> cores;
  for (size_t k = 0; k < d; ++k) cores.push_back(t->core(k));
  Stream st;
  Scratch out(4 * t->dense_size(), st.s);
  reconstruct_into(cores, t->modes, t->ranks, out.as<float>(), st.s);  // warm-up
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  check(cudaEventRecord(e0, st.s), "cudaEventRecord");
  for (size_t i = 0; i < std::max<size_t>(repeats, 1); ++i)
    reconstruct_into(cores, t->modes, t->ranks, out.as<float>(), st.s);
  check(cudaEventRecord(e1, st.s), "cudaEventRecord");
  st.sync();
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / 1e3 / double(std::max<size_t>(repeats, 1));
}

double dot_dense(uint64_t handle, const float* x, size_t n) {
  ensure_device();
  auto t = lookup(handle, "handle");
  if (n != t->dense_size()) throw TTError("bad_request", "x", "x must have as many elements as the dense tensor");
  size_t d = t->modes.size();
  std::vector<const float*> cores;
  for (size_t k = 0; k < d; ++k) cores.push_back(t->core(k));
  Stream st;
  Scratch dense(4 * n, st.s), dx(4 * n, st.s);
  constexpr int blocks = 256;
  Scratch partial(sizeof(double) * blocks, st.s);
  check(cudaMemcpyAsync(dx.p, x, 4 * n, cudaMemcpyHostToDevice, st.s), "cudaMemcpyAsync");
  reconstruct_into(cores, t->modes, t->ranks, dense.as<float>(), st.s);
  dot_partial<<<blocks, 256, 0, st.s>>>(dense.as<float>(), dx.as<float>(), n, partial.as<double>());
  check(cudaGetLastError(), "dot_partial launch");
  double host[blocks];
  check(cudaMemcpyAsync(host, partial.p, sizeof(host), cudaMemcpyDeviceToHost, st.s), "cudaMemcpyAsync");
  st.sync();
  double s = 0;
  for (double v : host) s += v;
  return s;
}

}  // namespace gpu
}  // namespace svc
