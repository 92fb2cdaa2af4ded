// TT x TT inner products on the device: one warp per (query, candidate) pair carries the
// r_q x r_c interface matrix W through the modes, W <- sum_i A_i^T W B_i, reading the candidate's
// ranks from its resident header: on the float64 tensor cores with W in registers when every rank
// is at most 16, else in shared memory (float64). dot() is a batch of one.
#include <algorithm>
#include <cmath>

#include "common.cuh"

namespace svc {
namespace gpu {

namespace {

// One warp per (query, candidate) pair, up to kMaxWarps pairs per block. Each lane owns tiles of
// 4 rows x 2 columns of a product and keeps them in registers over the shared dimension, so a
// float64 FMA costs under one load. Only __syncwarp orders the steps, no block-wide barrier.
// A mode whose incoming ranks are 1 (the first) or whose outgoing ranks are 1 (the last) is one
// product over all its slices at once: Wn = w * A^T B (n as the shared dimension), or
// sum(W o A B^T). Other modes go slice by slice, Wn = sum_i A_i^T (W B_i); when the ranks are
// small the warp splits into groups that take every G-th slice, each with its own M and partial
// Wn, summed at the end of the mode. Shared memory per warp: W, then G buffers M, then G partial
// Wn, each maxr x (maxr + 1) (an odd row stride: lanes reading different rows hit other banks).
constexpr int kMaxWarps = 4;
constexpr int TR = 4, TC = 2;  // tile rows, tile columns

__host__ __device__ inline int tiles_of(int rows, int cols) { return ((rows + TR - 1) / TR) * ((cols + TC - 1) / TC); }

__device__ inline double warp_sum(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

__global__ void tt_dot_warp(const float* __restrict__ q, const int* __restrict__ qr, const long long* __restrict__ qoff,
                            const int* __restrict__ modes, int d, const char* const* __restrict__ cands, int header,
                            int maxr, int gmax, long long npairs, double* __restrict__ out) {
  extern __shared__ double sh[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
  const long long pair = (long long)blockIdx.x * wpb + warp;
  if (pair >= npairs) return;  // whole warps leave; the others never wait for them
  const int ld = maxr + 1;
  const size_t mat = size_t(maxr) * ld;
  double* W = sh + size_t(warp) * (1 + 2 * size_t(gmax)) * mat;
  double* Ms = W + mat;
  double* Wns = Ms + size_t(gmax) * mat;
  const char* base = cands[pair];
  const int* cr = reinterpret_cast<const int*>(base);
  const float* cc = reinterpret_cast<const float*>(base + header);
  if (lane == 0) W[0] = 1.0;
  __syncwarp();
  long long coff = 0;
  for (int k = 0; k < d; ++k) {
    const int n = modes[k], qa = qr[k], qa1 = qr[k + 1], cb = cr[k], cb1 = cr[k + 1];
    const float* A = q + qoff[k];
    const float* B = cc + coff;
    coff += (long long)cb * n * cb1;
    if (qa1 == 1 && cb1 == 1) {
      // W (qa x cb) closes: sum_{a,b} W[a][b] * sum_i A[a][i] B[b][i]
      const int ct = (cb + TC - 1) / TC, nt = tiles_of(qa, cb);
      double part = 0;
      for (int t = lane; t < nt; t += 32) {
        const int r0 = (t / ct) * TR, c0 = (t % ct) * TC;
        double acc[TR][TC] = {};
        for (int i = 0; i < n; ++i) {
          const double b0 = B[size_t(c0) * n + i], b1 = c0 + 1 < cb ? double(B[size_t(c0 + 1) * n + i]) : 0.0;
#pragma unroll
          for (int r = 0; r < TR; ++r) {
            const double av = r0 + r < qa ? double(A[size_t(r0 + r) * n + i]) : 0.0;
            acc[r][0] = fma(av, b0, acc[r][0]);
            acc[r][1] = fma(av, b1, acc[r][1]);
          }
        }
#pragma unroll
        for (int r = 0; r < TR; ++r)
#pragma unroll
          for (int c = 0; c < TC; ++c)
            if (r0 + r < qa && c0 + c < cb) part = fma(W[(r0 + r) * ld + c0 + c], acc[r][c], part);
      }
      part = warp_sum(part);
      __syncwarp();  // every lane has read W
      if (lane == 0) W[0] = part;
      __syncwarp();
      continue;
    }
    if (qa == 1 && cb == 1) {
      // W is 1 x 1: Wn[p][c] = w * sum_i A[i][p] B[i][c]
      const double w = W[0];
      __syncwarp();  // every lane has read W[0] before W is rewritten
      const int ct = (cb1 + TC - 1) / TC, nt = tiles_of(qa1, cb1);
      for (int t = lane; t < nt; t += 32) {
        const int r0 = (t / ct) * TR, c0 = (t % ct) * TC;
        double acc[TR][TC] = {};
        for (int i = 0; i < n; ++i) {
          const float* brow = B + size_t(i) * cb1 + c0;
          const float* arow = A + size_t(i) * qa1 + r0;
          const double b0 = brow[0], b1 = c0 + 1 < cb1 ? double(brow[1]) : 0.0;
#pragma unroll
          for (int r = 0; r < TR; ++r) {
            const double av = r0 + r < qa1 ? double(arow[r]) : 0.0;
            acc[r][0] = fma(av, b0, acc[r][0]);
            acc[r][1] = fma(av, b1, acc[r][1]);
          }
        }
#pragma unroll
        for (int r = 0; r < TR; ++r)
#pragma unroll
          for (int c = 0; c < TC; ++c)
            if (r0 + r < qa1 && c0 + c < cb1) W[(r0 + r) * ld + c0 + c] = w * acc[r][c];
      }
      __syncwarp();
      continue;
    }
    const int ct1 = (cb1 + TC - 1) / TC;
    const int t1 = tiles_of(qa, cb1), t2 = tiles_of(qa1, cb1);
    const int G = max(1, min(min(gmax, n), 32 / max(t1, t2)));
    const int L = 32 / G, g = lane / L, l = lane % L;
    const bool member = g < G;  // lanes past G * L idle in this mode
    double* M = Ms + size_t(member ? g : 0) * mat;
    double* Wn = Wns + size_t(member ? g : 0) * mat;
    if (member)
      for (int t = l; t < t2; t += L) {
        const int r0 = (t / ct1) * TR, c0 = (t % ct1) * TC;
        for (int r = 0; r < TR; ++r)
          for (int c = 0; c < TC; ++c)
            if (r0 + r < qa1 && c0 + c < cb1) Wn[(r0 + r) * ld + c0 + c] = 0.0;
      }
    const int steps = (n + G - 1) / G;
    for (int s = 0; s < steps; ++s) {
      const int i = s * G + g;
      const bool has = member && i < n;
      // M (qa x cb1) = W (qa x cb) * B_i (cb x cb1), B_i[b][c] = B[(b * n + i) * cb1 + c]
      if (has)
        for (int t = l; t < t1; t += L) {
          const int r0 = (t / ct1) * TR, c0 = (t % ct1) * TC;
          double acc[TR][TC] = {};
          const float* Bi = B + size_t(i) * cb1 + c0;
          for (int b = 0; b < cb; ++b) {
            const float* row = Bi + size_t(b) * n * cb1;
            const double b0 = row[0], b1 = c0 + 1 < cb1 ? double(row[1]) : 0.0;
#pragma unroll
            for (int r = 0; r < TR; ++r) {
              const double w = r0 + r < qa ? W[(r0 + r) * ld + b] : 0.0;
              acc[r][0] = fma(w, b0, acc[r][0]);
              acc[r][1] = fma(w, b1, acc[r][1]);
            }
          }
#pragma unroll
          for (int r = 0; r < TR; ++r)
#pragma unroll
            for (int c = 0; c < TC; ++c)
              if (r0 + r < qa && c0 + c < cb1) M[(r0 + r) * ld + c0 + c] = acc[r][c];
        }
      __syncwarp();
      // Wn (qa1 x cb1) += A_i^T (qa1 x qa) * M, A_i[a][p] = A[(a * n + i) * qa1 + p]; each lane
      // owns the same Wn tiles for every slice, so the sums need no ordering between lanes
      if (has)
        for (int t = l; t < t2; t += L) {
          const int r0 = (t / ct1) * TR, c0 = (t % ct1) * TC;
          double acc[TR][TC] = {};
          const float* Ai = A + size_t(i) * qa1 + r0;
          for (int a = 0; a < qa; ++a) {
            const float* row = Ai + size_t(a) * n * qa1;
            const double m0 = M[a * ld + c0], m1 = c0 + 1 < cb1 ? M[a * ld + c0 + 1] : 0.0;
#pragma unroll
            for (int r = 0; r < TR; ++r) {
              const double av = r0 + r < qa1 ? double(row[r]) : 0.0;
              acc[r][0] = fma(av, m0, acc[r][0]);
              acc[r][1] = fma(av, m1, acc[r][1]);
            }
          }
#pragma unroll
          for (int r = 0; r < TR; ++r)
#pragma unroll
            for (int c = 0; c < TC; ++c)
              if (r0 + r < qa1 && c0 + c < cb1) Wn[(r0 + r) * ld + c0 + c] += acc[r][c];
        }
      __syncwarp();  // M is rewritten by the next slice
    }
    // W (qa1 x cb1) = the sum of the groups' partial Wn
    for (int e = lane; e < qa1 * cb1; e += 32) {
      const int at = (e / cb1) * ld + e % cb1;
      double v = 0;
      for (int h = 0; h < G; ++h) v += Wns[size_t(h) * mat + at];
      W[at] = v;
    }
    __syncwarp();
  }
  if (lane == 0) out[pair] = W[0];
}

// Ranks up to 16 everywhere: the float64 tensor cores (DMMA, mma.m8n8k4.f64, sm_80 and later).
// One warp per pair again, but W stays in registers in the MMA accumulator layout for the whole
// chain: lane (g = lane / 4, j = lane % 4) holds W[pb * 8 + g][cb * 8 + 2j + e] for the P/8 x P/8
// blocks (pb, cb) and e = 0, 1; ranks below P are zero-padded. The shared index of every product
// is visited in the order kperm: k-step kk of lane j takes index (kk / 2) * 8 + 2j + kk % 2, which
// is exactly an element the lane already holds of an accumulator, so a result feeds the next
// product as its B operand with no shuffle and no shared memory. Per middle slice i:
//   M^T (cb1 x qa) = B_i^T W^T   then   Wn (qa1 x cb1) += A_i^T M,
// 2 (P/8)^2 (P/4) DMMAs; the first mode is Wn = A^T B over its n slices and the last closes with
// sum(W o A B^T), both with n as the shared index.
constexpr int kMmaWarps = 4;

__device__ __forceinline__ void dmma(double (&c)[2], double a, double b) {
  asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
      : "+d"(c[0]), "+d"(c[1])
      : "d"(a), "d"(b));
}

__device__ __forceinline__ int kperm(int kk, int j) { return (kk >> 1) * 8 + 2 * j + (kk & 1); }

// NB x NB blocks of 8 x 8 in the accumulator layout: element [x][y][e] of lane (g, j) is row
// x * 8 + g, column y * 8 + 2j + e. Value-initialised (Tile<NB> t{}) it is zero.
template <int NB>
struct Tile {
  double v[NB][NB][2];
};

// acc += a b^T over a mode's n slices (n the shared index, 4 per k-step): a(r, i) =
// a[r * ar + i * ai] for r < na, likewise b; rows past na or nb are zero.
template <int NB>
__device__ __forceinline__ void over_slices(Tile<NB>& acc, int n, int g, int j, const float* a, int na, size_t ar,
                                            size_t ai, const float* b, int nb, size_t br, size_t bi) {
  for (int i0 = 0; i0 < n; i0 += 4) {
    const int i = i0 + j;
    double af[NB], bf[NB];
#pragma unroll
    for (int x = 0; x < NB; ++x) {
      const int r = x * 8 + g;
      af[x] = i < n && r < na ? double(a[r * ar + i * ai]) : 0.0;
      bf[x] = i < n && r < nb ? double(b[r * br + i * bi]) : 0.0;
    }
#pragma unroll
    for (int x = 0; x < NB; ++x)
#pragma unroll
      for (int y = 0; y < NB; ++y) dmma(acc.v[x][y], af[x], bf[y]);
  }
}

// acc += op x^T over the shared index in kperm order: op[x][kk] is this lane's element of row
// x * 8 + g at k-step kk, and x's element at that k-step is one it holds already,
// x.v[y][kk / 2][kk % 2] (the accumulator layout), so a product's result is the next one's operand.
template <int NB, int KS>
__device__ __forceinline__ void times_tile(Tile<NB>& acc, const float (&op)[NB][KS], const Tile<NB>& x) {
#pragma unroll
  for (int r = 0; r < NB; ++r)
#pragma unroll
    for (int c = 0; c < NB; ++c)
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) dmma(acc.v[r][c], double(op[r][kk]), x.v[c][kk >> 1][kk & 1]);
}

template <int P>
__global__ void __launch_bounds__(32 * kMmaWarps)
    tt_dot_mma(const float* __restrict__ q, const int* __restrict__ qr, const long long* __restrict__ qoff,
               const int* __restrict__ modes, int d, const char* const* __restrict__ cands, int header,
               long long npairs, double* __restrict__ out) {
  constexpr int NB = P / 8, KS = P / 4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long pair = (long long)blockIdx.x * kMmaWarps + warp;
  if (pair >= npairs) return;  // whole warps leave: every mma.sync below has its 32 lanes
  const int g = lane >> 2, j = lane & 3;
  const char* base = cands[pair];
  const int* cr = reinterpret_cast<const int*>(base);
  const float* cc = reinterpret_cast<const float*>(base + header);
  Tile<NB> W{};
  if (lane == 0) W.v[0][0][0] = 1.0;  // W = 1 (1 x 1): row 0, column 0
  long long coff = 0;
  double score = 0;
  for (int k = 0; k < d; ++k) {
    const int n = modes[k], qa = qr[k], qa1 = qr[k + 1], cb = cr[k], cb1 = cr[k + 1];
    const float* A = q + qoff[k];
    const float* B = cc + coff;
    coff += (long long)cb * n * cb1;
    if (k == d - 1) {
      // the last mode (qa1 = cb1 = 1): C[a][b] = sum_i A[a][i] B[b][i], the score sum(W o C)
      Tile<NB> C{};
      over_slices(C, n, g, j, A, qa, n, 1, B, cb, n, 1);
      double part = 0;
#pragma unroll
      for (int x = 0; x < NB; ++x)
#pragma unroll
        for (int y = 0; y < NB; ++y) part = fma(W.v[x][y][0], C.v[x][y][0], fma(W.v[x][y][1], C.v[x][y][1], part));
      score = warp_sum(part);
      break;
    }
    Tile<NB> Wn{};
    if (k == 0) {
      // the first mode (qa = cb = 1, W = 1): Wn[p][c] = sum_i A[i][p] B[i][c]
      over_slices(Wn, n, g, j, A, qa1, 1, qa1, B, cb1, 1, cb1);
    } else {
      // B_i^T[c][b] = B[(b * n + i) * cb1 + c], A_i^T[p][a] = A[(a * n + i) * qa1 + p]; this lane's
      // elements of a slice, one slice ahead so their loads overlap the products
      const size_t bs = size_t(n) * cb1, as = size_t(n) * qa1;
      float bv[NB][KS], av[NB][KS];
      auto fetch = [&](int i) {
#pragma unroll
        for (int x = 0; x < NB; ++x)
#pragma unroll
          for (int kk = 0; kk < KS; ++kk) {
            const int r = x * 8 + g, s = kperm(kk, j);
            bv[x][kk] = i < n && s < cb && r < cb1 ? B[s * bs + size_t(i) * cb1 + r] : 0.f;
            av[x][kk] = i < n && s < qa && r < qa1 ? A[s * as + size_t(i) * qa1 + r] : 0.f;
          }
      };
      fetch(0);
      for (int i = 0; i < n; ++i) {
        float bc[NB][KS], ac[NB][KS];
#pragma unroll
        for (int x = 0; x < NB; ++x)
#pragma unroll
          for (int kk = 0; kk < KS; ++kk) bc[x][kk] = bv[x][kk], ac[x][kk] = av[x][kk];
        fetch(i + 1);
        Tile<NB> MT{};  // M^T[c][a]: block (c / 8, a / 8)
        times_tile(MT, bc, W);
        times_tile(Wn, ac, MT);
      }
    }
    W = Wn;
  }
  if (lane == 0) out[pair] = score;
}

}  // namespace

// Scores <query, cand_j> into host `out` (cands.size() doubles).
void dot_scores(uint64_t query, const std::vector<uint64_t>& cands, double* out) {
  ensure_device();
  auto qt = lookup(query, "query");
  std::vector<std::shared_ptr<DevTT>> cs = lookup_all(cands, "candidates");
  size_t maxr = 1;
  for (size_t r : qt->ranks) maxr = std::max(maxr, r);
  for (size_t j = 0; j < cs.size(); ++j) {
    if (cs[j]->modes_id != qt->modes_id)
      throw TTError("bad_request", "candidates",
                    "candidate " + std::to_string(j) + " has other TT modes than the query");
    maxr = std::max(maxr, cs[j]->max_rank);
  }
  if (cands.empty()) return;
  // ranks up to 16: the tensor-core kernel; above, the shared-memory kernel and its limit
  const bool mma = maxr <= 16;
  int gmax = 1;
  size_t wpb = kMmaWarps, smem = 0;
  if (!mma) {
    int dev = 0, optin = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "cudaDeviceGetAttribute");
    // slice groups a warp can split into at the largest ranks (at least 1), and the shared memory
    gmax = std::max(1, 32 / tiles_of(int(maxr), int(maxr)));
    const size_t per_warp = (1 + 2 * size_t(gmax)) * maxr * (maxr + 1) * sizeof(double);
    if (per_warp > size_t(optin))
      throw TTError("bad_request", "ranks",
                    "TT ranks above " + std::to_string(size_t(std::sqrt(optin / 24.0)) - 1) +
                        " do not fit the device's shared memory for inner products");
    wpb = std::max<size_t>(1, std::min<size_t>(kMaxWarps, size_t(optin) / per_warp));
    smem = wpb * per_warp;
    check(cudaFuncSetAttribute(tt_dot_warp, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
          "cudaFuncSetAttribute");
  }
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
  // one launch per 2^31-1 blocks at most (gridDim.x)
  const size_t per_launch = size_t(0x7fffffff) * wpb;
  for (size_t j0 = 0; j0 < ptrs.size(); j0 += per_launch) {
    const size_t np = std::min(ptrs.size() - j0, per_launch);
    const unsigned blocks = unsigned((np + wpb - 1) / wpb), threads = unsigned(32 * wpb);
    const char* const* cp = d_ptrs.as<const char*>() + j0;
    double* op = d_out.as<double>() + j0;
    if (!mma)
      tt_dot_warp<<<blocks, threads, smem, st.s>>>(qt->cores(), d_qr, d_qoff, d_modes, int(d), cp, int(qt->header),
                                                   int(maxr), gmax, (long long)np, op);
    else if (maxr <= 8)
      tt_dot_mma<8><<<blocks, threads, 0, st.s>>>(qt->cores(), d_qr, d_qoff, d_modes, int(d), cp, int(qt->header),
                                                  (long long)np, op);
    else
      tt_dot_mma<16><<<blocks, threads, 0, st.s>>>(qt->cores(), d_qr, d_qoff, d_modes, int(d), cp, int(qt->header),
                                                   (long long)np, op);
    check(cudaGetLastError(), "tt_dot launch");
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
