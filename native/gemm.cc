#include "gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "kernels.h"
#include "threads.h"

namespace svc {
namespace {

constexpr size_t KC = 256;
constexpr size_t MC = 144;  // a multiple of every MR (4, 6, 8)
constexpr size_t NC = 512;  // a multiple of every NR

// 64-byte aligned scratch owned by each thread, grown on demand.
template <typename T>
T* scratch(int slot, size_t n) {
  struct Buf {
    void* p = nullptr;
    size_t cap = 0;
    ~Buf() { std::free(p); }
  };
  thread_local Buf bufs[2];
  Buf& b = bufs[slot];
  size_t bytes = n * sizeof(T);
  if (b.cap < bytes) {
    std::free(b.p);
    b.p = nullptr;
    b.cap = 0;
    size_t want = (bytes + 63) / 64 * 64;
    b.p = std::aligned_alloc(64, want);
    if (!b.p) throw std::bad_alloc();
    b.cap = want;
  }
  return static_cast<T*>(b.p);
}

template <typename TS, typename TD>
void pack_a(size_t mc, size_t kc, const TS* A, ptrdiff_t rs, ptrdiff_t cs, size_t MR, TD* dst) {
  for (size_t i0 = 0; i0 < mc; i0 += MR) {
    size_t mr = std::min(MR, mc - i0);
    TD* d = dst + i0 * kc;
    if (cs == 1) {
      for (size_t i = 0; i < mr; ++i) {
        const TS* src = A + (i0 + i) * rs;
        for (size_t p = 0; p < kc; ++p) d[p * MR + i] = static_cast<TD>(src[p]);
      }
    } else {
      for (size_t p = 0; p < kc; ++p)
        for (size_t i = 0; i < mr; ++i) d[p * MR + i] = static_cast<TD>(A[(i0 + i) * rs + p * cs]);
    }
    if (mr < MR)
      for (size_t p = 0; p < kc; ++p)
        for (size_t i = mr; i < MR; ++i) d[p * MR + i] = TD(0);
  }
}

template <typename TS, typename TD>
void pack_b(size_t kc, size_t nc, const TS* B, ptrdiff_t rs, ptrdiff_t cs, size_t NR, TD* dst) {
  for (size_t j0 = 0; j0 < nc; j0 += NR) {
    size_t nr = std::min(NR, nc - j0);
    TD* d = dst + j0 * kc;
    if (cs == 1) {
      for (size_t p = 0; p < kc; ++p) {
        const TS* src = B + p * rs + j0;
        // Two panels ahead in the same row: the rows of B are as many streams as kc, more than
        // the hardware prefetchers follow.
        if (j0 + 3 * NR <= nc) __builtin_prefetch(src + 2 * NR, 0, 2);
        for (size_t j = 0; j < nr; ++j) d[p * NR + j] = static_cast<TD>(src[j]);
        for (size_t j = nr; j < NR; ++j) d[p * NR + j] = TD(0);
      }
    } else {
      for (size_t j = 0; j < nr; ++j) {
        const TS* src = B + (j0 + j) * cs;
        for (size_t p = 0; p < kc; ++p) d[p * NR + j] = static_cast<TD>(src[p * rs]);
      }
      if (nr < NR)
        for (size_t p = 0; p < kc; ++p)
          for (size_t j = nr; j < NR; ++j) d[p * NR + j] = TD(0);
    }
  }
}

template <typename T>
struct Micro;
template <>
struct Micro<double> {
  static size_t mr() { return K().mr_d; }
  static size_t nr() { return K().nr_d; }
  static void run(size_t kc, const double* a, const double* b, double* c, size_t ldc, size_t m, size_t n, bool acc,
                  bool stream) {
    K().mk_d(kc, a, b, c, ldc, m, n, acc, stream);
  }
};
template <>
struct Micro<float> {
  static size_t mr() { return K().mr_f; }
  static size_t nr() { return K().nr_f; }
  static void run(size_t kc, const float* a, const float* b, float* c, size_t ldc, size_t m, size_t n, bool acc,
                  bool stream) {
    K().mk_f(kc, a, b, c, ldc, m, n, acc, stream);
  }
};

// One output tile [i0, i0+mc) x [j0, j0+nc) over k in [k0, k1).
template <typename TA, typename TB, typename TC>
void tile(size_t i0, size_t mc, size_t j0, size_t nc, size_t k0, size_t k1, const TA* A, ptrdiff_t rsA, ptrdiff_t csA,
          const TB* B, ptrdiff_t rsB, ptrdiff_t csB, TC* C, size_t ldc, bool accumulate, bool stream = false) {
  const size_t MR = Micro<TC>::mr(), NR = Micro<TC>::nr();
  size_t mcp = (mc + MR - 1) / MR * MR, ncp = (nc + NR - 1) / NR * NR;
  TC* pa = scratch<TC>(0, mcp * KC);
  TC* pb = scratch<TC>(1, ncp * KC);
  for (size_t p0 = k0; p0 < k1; p0 += KC) {
    size_t kc = std::min(KC, k1 - p0);
    bool acc = accumulate || p0 > k0;
    pack_b(kc, nc, B + p0 * rsB + j0 * csB, rsB, csB, NR, pb);
    pack_a(mc, kc, A + i0 * rsA + p0 * csA, rsA, csA, MR, pa);
    for (size_t jj = 0; jj < nc; jj += NR) {
      size_t nr = std::min(NR, nc - jj);
      for (size_t ii = 0; ii < mc; ii += MR) {
        size_t mr = std::min(MR, mc - ii);
        Micro<TC>::run(kc, pa + ii * kc, pb + jj * kc, C + (i0 + ii) * ldc + j0 + jj, ldc, mr, nr, acc,
                       stream && k1 - k0 <= KC);
      }
    }
  }
}

}  // namespace

template <typename TA, typename TB, typename TC>
void gemm(size_t M, size_t N, size_t K, const TA* A, ptrdiff_t rsA, ptrdiff_t csA, const TB* B, ptrdiff_t rsB,
          ptrdiff_t csB, TC* C, size_t ldc, bool accumulate, bool parallel) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate)
      for (size_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, TC(0));
    return;
  }
  const size_t mt = (M + MC - 1) / MC, nt = (N + NC - 1) / NC;
  const size_t threads = parallel ? static_cast<size_t>(pool_threads()) : 1;
  const double flops = double(M) * double(N) * double(K);
  if (threads <= 1 || flops < 4e6) {
    for (size_t a = 0; a < mt; ++a)
      for (size_t b = 0; b < nt; ++b)
        tile(a * MC, std::min(MC, M - a * MC), b * NC, std::min(NC, N - b * NC), 0, K, A, rsA, csA, B, rsB, csB, C, ldc,
             accumulate);
    return;
  }
  const size_t tiles = mt * nt;
  const size_t kblocks = (K + KC - 1) / KC;
  if (tiles >= 2 * threads || kblocks < 2 * threads || double(M) * double(N) > 4e6) {
    // Split finer than MC x NC when there are too few tiles for the threads.
    size_t mcs = MC, ncs = NC;
    while (((M + mcs - 1) / mcs) * ((N + ncs - 1) / ncs) < 4 * threads && (ncs > 64 || mcs > 48)) {
      if (ncs > 64 && (N + ncs - 1) / ncs <= (M + mcs - 1) / mcs) ncs /= 2;
      else if (mcs > 48) mcs /= 3;
      else ncs /= 2;
    }
    size_t mts = (M + mcs - 1) / mcs, nts = (N + ncs - 1) / ncs;
    // Large outputs written once (inner dimension within one block, as in reconstruction): bypass
    // the cache with non-temporal stores when every row start is 64-byte aligned.
    const bool stream = !accumulate && K <= KC && double(M) * double(N) * sizeof(TC) >= double(16 << 20) &&
                        reinterpret_cast<uintptr_t>(C) % 64 == 0 && (ldc * sizeof(TC)) % 64 == 0 &&
                        ncs % Micro<TC>::nr() == 0;
    parallel_for(mts * nts, [&](size_t t) {
      size_t a = t / nts, b = t % nts;
      size_t i0 = a * mcs, j0 = b * ncs;
      tile(i0, std::min(mcs, M - i0), j0, std::min(ncs, N - j0), 0, K, A, rsA, csA, B, rsB, csB, C, ldc, accumulate,
           stream);
      if (stream) stream_fence();
    });
    return;
  }
  // Few output tiles and a long K (Gram matrices): split K, then add the partial products.
  size_t parts = std::min(kblocks, threads * 2);
  size_t per = (kblocks + parts - 1) / parts * KC;
  parts = (K + per - 1) / per;
  std::vector<TC> partial((parts - 1) * M * N);
  parallel_for(parts, [&](size_t t) {
    size_t k0 = t * per, k1 = std::min(K, k0 + per);
    TC* out = t == 0 ? C : partial.data() + (t - 1) * M * N;
    size_t ld = t == 0 ? ldc : N;
    bool acc = t == 0 ? accumulate : false;
    for (size_t a = 0; a < mt; ++a)
      for (size_t b = 0; b < nt; ++b)
        tile(a * MC, std::min(MC, M - a * MC), b * NC, std::min(NC, N - b * NC), k0, k1, A, rsA, csA, B, rsB, csB, out,
             ld, acc);
  });
  for (size_t t = 1; t < parts; ++t) {
    const TC* src = partial.data() + (t - 1) * M * N;
    for (size_t i = 0; i < M; ++i)
      for (size_t j = 0; j < N; ++j) C[i * ldc + j] += src[i * N + j];
  }
}

#define SVC_GEMM(TA, TB, TC)                                                                                    \
  template void gemm<TA, TB, TC>(size_t, size_t, size_t, const TA*, ptrdiff_t, ptrdiff_t, const TB*, ptrdiff_t, \
                                 ptrdiff_t, TC*, size_t, bool, bool);
SVC_GEMM(float, float, float)
SVC_GEMM(double, double, double)
SVC_GEMM(float, float, double)
SVC_GEMM(float, double, double)
SVC_GEMM(double, float, double)
SVC_GEMM(double, float, float)
SVC_GEMM(float, double, float)
#undef SVC_GEMM

}  // namespace svc
