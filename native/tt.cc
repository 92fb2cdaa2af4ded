// The TT operations: compress (TT-SVD passes and their repair), reconstruct and round; the dot
// products are in tt_dot.cc.
#include "tt.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "gemm.h"
#include "linalg.h"
#include "rank_probe.h"
#include "svd.h"
#include "threads.h"
#include "tt_chain.h"
#include "tt_util.h"

namespace svc {

using namespace tt_detail;

// Largest side for which rounding uses Jacobi SVD (accurate) rather than the Gram route (fast).
constexpr size_t kMaxJacobi = 384;

namespace {

// Squared difference of n entries in float64; data far from 1 in magnitude (scale_e != 0) have
// their differences scaled by 2^scale_e before squaring (norm2 is of the scaled data), so that
// neither overflows nor underflows.
template <typename T>
double sqdiff_scaled(const T* a, const T* b, size_t n, double f1, double f2, bool scaled) {
  if (!scaled) return sqdiffk(a, b, n);
  double acc = 0;
  for (size_t j = 0; j < n; ++j) {
    double dlt = (double(a[j]) - double(b[j])) * f1 * f2;
    acc += dlt * dlt;
  }
  return acc;
}

// Relative error of a TT against the dense data it came from: the two dense halves L (P x r)
// and R (r x Q) of the reconstruction (tt_chain.h) once, then tiles of L R of about 64K entries,
// each compared with the data while it is in cache, split over the pool. Where the halves would
// be larger than a quarter of the data (ranks near full), a chunked reconstruction (1/8 of the
// first mode at a time) instead.
template <typename T>
double measure_error(const T* data, size_t n, const std::vector<const T*>& cores, const std::vector<size_t>& modes,
                     const std::vector<size_t>& ranks, double norm2, int scale_e = 0) {
  const double f1 = std::ldexp(1.0, scale_e / 2), f2 = std::ldexp(1.0, scale_e - scale_e / 2);
  const bool scaled = scale_e != 0;
  std::vector<CoreRef<T>> refs = full_refs(cores, modes, ranks);
  // The split with the fewest products (each entry of L R costs r_s of them, plus a few for its
  // store and comparison, and the halves their chains, whose small GEMMs run slower) among those
  // whose halves fit in a quarter of the data.
  size_t s = 0, rs = 0;
  {
    const size_t d = refs.size();
    std::vector<double> P(d + 1, 1.0), Q(d + 1, 1.0), lc(d + 1, 0.0), rc(d + 1, 0.0);
    for (size_t k = 0; k < d; ++k) P[k + 1] = P[k] * double(refs[k].n);
    for (size_t k = d; k-- > 0;) Q[k] = Q[k + 1] * double(refs[k].n);
    for (size_t k = 1; k < d; ++k) lc[k + 1] = lc[k] + P[k] * double(refs[k].r0) * double(refs[k].n * refs[k].r1);
    for (size_t k = d - 1; k-- > 0;) rc[k] = rc[k + 1] + double(refs[k].r0 * refs[k].n) * double(refs[k].r1) * Q[k + 1];
    double best = 0;
    for (size_t k = 1; k < d; ++k) {
      const double mem = (P[k] + Q[k]) * double(refs[k].r0);
      if (mem > 0.25 * double(n)) continue;
      // (short rows of L R make short, slow tiles: counted twice)
      const double cost = (double(n) * double(refs[k].r0 + 4) + 4 * (lc[k] + rc[k])) * (Q[k] < 256 ? 2 : 1);
      if (s == 0 || cost < best) {
        s = k;
        rs = refs[k].r0;
        best = cost;
      }
    }
  }
  if (s > 0) {
    {
      size_t rows = 0, cols = 0;
      std::vector<T> lbuf, rbuf;
      const T* L;
      const T* R;
      L = left_chain(refs, s, lbuf, rows);
      R = right_chain(refs, s, rbuf, cols);
      // Tiles of 512 columns (their block of R stays in cache) by 64 rows; float32 differences
      // cannot overflow or underflow in float64, so scaled float32 data are compared as they are
      // and the sum scaled afterwards.
      const size_t cb = std::min<size_t>(cols, 512), mb = std::max<size_t>(1, std::min(rows, 32768 / cb));
      const size_t nrb = (rows + mb - 1) / mb, ncb = (cols + cb - 1) / cb, tiles = nrb * ncb;
      const size_t parts = std::min(tiles, 8 * size_t(pool_threads()));
      const bool direct = rs <= 256 && (std::is_same_v<T, float> || !scaled);
      std::vector<double> part(parts, 0.0);
      parallel_for(parts, [&](size_t t) {
        std::vector<T> buf(direct ? 0 : mb * cb), rbs;
        T* rb = nullptr;
        size_t have = SIZE_MAX;
        double acc = 0;
        for (size_t b = tiles * t / parts; b < tiles * (t + 1) / parts; ++b) {
          const size_t j0 = (b / nrb) * cb, i0 = (b % nrb) * mb;
          const size_t len = std::min(mb, rows - i0), w = std::min(cb, cols - j0);
          if (direct) {
            // The block of R copied together: its rows, a power of two apart in R, would share
            // cache sets.
            // (64-byte aligned, so that its vector loads do not split cache lines)
            if (have != j0) {
              const size_t align = 64 / sizeof(T);
              rbs.resize(rs * w + align);
              rb = rbs.data() + (align - (reinterpret_cast<uintptr_t>(rbs.data()) / sizeof(T)) % align) % align;
              for (size_t p = 0; p < rs; ++p) std::memcpy(rb + p * w, R + p * cols + j0, w * sizeof(T));
              have = j0;
            }
            acc += lr_sqdiffk(len, w, rs, L + i0 * rs, rs, rb, w, data + i0 * cols + j0, cols);
            continue;
          }
          gemm<T, T, T>(len, w, rs, L + i0 * rs, rs, 1, R + j0, cols, 1, buf.data(), w, false, false);
          for (size_t i = 0; i < len; ++i)
            acc += sqdiff_scaled(data + (i0 + i) * cols + j0, buf.data() + i * w, w, f1, f2, scaled);
        }
        part[t] = direct && scaled ? std::ldexp(acc, 2 * scale_e) : acc;
      });
      double err2 = 0;
      for (double v : part) err2 += v;
      return std::sqrt(err2 / norm2);
    }
  }
  size_t n0 = modes[0], per = n / n0;
  size_t step = std::max<size_t>(1, std::min(n0, (size_t(1) << 22) / std::max<size_t>(per, 1)));
  if (n0 >= 8 && step > n0 / 8) step = std::max<size_t>(1, n0 / 8);
  Buffer buf = alloc_buffer(step * per, sizeof(T));
  double err2 = 0;
  for (size_t a = 0; a < n0; a += step) {
    size_t len = std::min(step, n0 - a);
    size_t r1 = ranks[1];
    refs[0] = {cores[0] + a * r1, 1, len, r1};
    contract_chain(refs, buf.as<T>());
    const T* src = data + a * per;
    size_t cnt = len * per;
    size_t nb = (cnt + kChunk - 1) / kChunk;
    std::vector<double> part(nb);
    parallel_for(nb, [&](size_t i) {
      size_t s = i * kChunk;
      part[i] = sqdiff_scaled(src + s, buf.as<T>() + s, std::min(kChunk, cnt - s), f1, f2, scaled);
    });
    for (double v : part) err2 += v;
  }
  return std::sqrt(err2 / norm2);
}

// Routes of a TT-SVD pass, from fastest to most accurate: kFast uses the randomized range finder
// on large unfoldings, kExact the float64 Gram matrix of every unfolding (singular values down to
// about 1e-8 of the largest), kPrecise QR + one-sided Jacobi in float64 on every unfolding with
// float64 remainders (relative accuracy, for tolerances below what the Gram matrix resolves).
enum Route { kFast = 0, kExact = 1, kPrecise = 2 };

// The first steps of a TT-SVD pass need no remainder of their own: with G = A A^T, the float64
// Gram matrix of the data's unfolding with M_p = n_0 ... n_{p-1} rows, the Gram matrix of step
// k < p is (F^T (x) I) G_{k+1} (F (x) I), where G_{k+1} is G summed over its last p - k - 1
// digits (the Gram matrix of the unfolding with M_{k+1} rows) and F (M_k x r_k) is the product
// of the earlier steps' cores (the frame: the remainder is F^T A). One pass over the data forms
// G, one more the remainder after step p - 1; the steps in between cost nothing proportional to
// the data.
struct PrefixGram {
  std::vector<double> G;  // Mp x Mp
  size_t Mp = 0;
  std::vector<double> F;  // frame of the steps done: M_k x r_k, row-major
  bool identity = true;   // every step so far kept its whole row space (F = I)
};

// How many leading steps go through one Gram matrix: the most with M_p <= 128, M_p^2 <= n (every
// one of those steps then has at most as many rows as columns) and p <= d - 2 (the last step
// keeps its own route).
size_t prefix_length(const std::vector<size_t>& modes, size_t n) {
  size_t d = modes.size(), p = 0, M = 1;
  while (p + 2 < d) {
    size_t next = M * modes[p];
    if (next > 128 || double(next) * double(next) > double(n)) break;
    M = next;
    ++p;
  }
  return p;
}

Factor prefix_step(PrefixGram& P, const std::vector<size_t>& modes, size_t k, double delta2, size_t max_rank) {
  size_t Mk = 1;
  for (size_t j = 0; j < k; ++j) Mk *= modes[j];
  const size_t nk = modes[k], M1 = Mk * nk, T = P.Mp / M1;
  const size_t R = P.identity ? Mk : P.F.size() / Mk, g = R * nk;
  // G_{k+1}: the Gram matrix of the unfolding with M1 rows (the trailing T digits summed).
  std::vector<double> G1(M1 * M1, 0.0);
  for (size_t I = 0; I < M1; ++I)
    for (size_t J = 0; J < M1; ++J) {
      const double* gp = P.G.data() + (I * T) * P.Mp + J * T;
      double s = 0;
      for (size_t t = 0; t < T; ++t) s += gp[t * P.Mp + t];
      G1[I * M1 + J] = s;
    }
  std::vector<double> H;
  if (P.identity) {
    H.swap(G1);
  } else {
    // Y[(a,j), (i',j')] = sum_i F[i,a] G1[(i,j), (i',j')]; H[(a,j), (a',j')] = sum_i' Y[(a,j), (i',j')] F[i',a'].
    std::vector<double> Y(g * M1, 0.0);
    for (size_t i = 0; i < Mk; ++i)
      for (size_t a = 0; a < R; ++a) {
        const double f = P.F[i * R + a];
        if (f == 0.0) continue;
        for (size_t j = 0; j < nk; ++j) {
          const double* src = G1.data() + (i * nk + j) * M1;
          double* dst = Y.data() + (a * nk + j) * M1;
          for (size_t c = 0; c < M1; ++c) dst[c] += f * src[c];
        }
      }
    H.assign(g * g, 0.0);
    for (size_t row = 0; row < g; ++row) {
      const double* y = Y.data() + row * M1;
      double* h = H.data() + row * g;
      for (size_t i = 0; i < Mk; ++i)
        for (size_t j = 0; j < nk; ++j) {
          const double v = y[i * nk + j];
          const double* f = P.F.data() + i * R;
          for (size_t a = 0; a < R; ++a) h[a * nk + j] += v * f[a];
        }
    }
  }
  Factor f = factor_gram(H, g, delta2, max_rank);
  // The new frame: F'[(i,j), b] = sum_a F[i,a] Q[(a,j), b] (F' = F (x) I when the step keeps
  // everything).
  if (f.identity) {
    if (!P.identity) {
      std::vector<double> F2(M1 * g, 0.0);
      for (size_t i = 0; i < Mk; ++i)
        for (size_t j = 0; j < nk; ++j)
          for (size_t a = 0; a < R; ++a) F2[(i * nk + j) * g + a * nk + j] = P.F[i * R + a];
      P.F.swap(F2);
    }
  } else {
    const size_t r = f.r;
    std::vector<double> F2(M1 * r, 0.0);
    for (size_t i = 0; i < Mk; ++i)
      for (size_t j = 0; j < nk; ++j) {
        double* dst = F2.data() + (i * nk + j) * r;
        for (size_t a = 0; a < R; ++a) {
          const double fa = P.identity ? (a == i ? 1.0 : 0.0) : P.F[i * R + a];
          if (fa == 0.0) continue;
          const double* q = f.Q.data() + (a * nk + j) * r;
          for (size_t b = 0; b < r; ++b) dst[b] += fa * q[b];
        }
      }
    P.F.swap(F2);
    P.identity = false;
  }
  return f;
}

// One TT-SVD pass (kFast or kExact) in the working type. Returns false when min_ratio proved
// unreachable (probe given); capped says whether max_rank bound at some step.
template <typename T>
bool svd_pass(const T* data, size_t n, const std::vector<size_t>& modes, double delta2, size_t max_rank, Route route,
              RankProbe* probe, double min_ratio, const std::vector<double>& gram, TTResult& res, bool& capped) {
  size_t d = modes.size();
  res = TTResult();
  res.ranks.assign(1, 1);
  capped = false;
  const T* cur = data;
  Buffer curbuf;
  size_t rprev = 1, rest = n;
  double discarded = 0;
  // The first p steps from one Gram matrix of the data (see PrefixGram), when there are two or
  // more of them (gram: that matrix, when the caller formed it).
  PrefixGram pre;
  size_t p = prefix_length(modes, n);
  if (p >= 2) {
    size_t Mp = 1;
    for (size_t k = 0; k < p; ++k) Mp *= modes[k];
    if (gram.size() == Mp * Mp) {
      pre.G = gram;
    } else {
      pre.G.assign(Mp * Mp, 0.0);
      gram_rows(data, Mp, n / Mp, pre.G.data());
    }
    pre.Mp = Mp;
    pre.F.assign(1, 1.0);
  } else {
    p = 0;
  }
  for (size_t k = 0; k + 1 < d; ++k) {
    size_t m = rprev * modes[k], N = rest / modes[k];
    bool last = k + 2 == d;
    Factor f = k < p            ? prefix_step(pre, modes, k, delta2, max_rank)
               : route == kFast ? factor_step(cur, m, N, delta2, max_rank, last)
                                : factor_exact(cur, m, N, delta2, max_rank, last);
    capped = capped || f.capped;
    discarded += f.discarded;
    if (probe) {
      // The ranks so far are final; bound the rest before building this step's core.
      std::vector<size_t> known(res.ranks);
      known.push_back(f.r);
      size_t s = k + 1;
      bool chain = f.kept_min > double(d - 1 - s) * delta2 + probe->margin;
      if (double(n) / probe->size_bound(known, s, discarded, chain) < min_ratio) return false;
    }
    Buffer core = alloc_buffer(m * f.r, sizeof(T));
    T* cp = core.as<T>();
    if (k < p) {
      // The core now; the remainder once, after the last of these steps, from the data and the
      // frame of the steps together.
      if (f.identity) {
        std::fill(cp, cp + m * f.r, T(0));
        for (size_t i = 0; i < m; ++i) cp[i * f.r + i] = T(1);
      } else {
        for (size_t i = 0; i < m * f.r; ++i) cp[i] = static_cast<T>(f.Q[i]);
      }
      if (k + 1 == p && !pre.identity) {
        Factor frame;
        frame.r = f.r;
        frame.Q.swap(pre.F);
        curbuf = project(frame, data, pre.Mp, n / pre.Mp);
        cur = curbuf.as<T>();
      }
    } else if (f.right_identity) {
      std::memcpy(cp, cur, m * N * sizeof(T));
      Buffer eye = alloc_buffer(N * N, sizeof(T));
      T* ep = eye.as<T>();
      std::fill(ep, ep + N * N, T(0));
      for (size_t i = 0; i < N; ++i) ep[i * N + i] = T(1);
      curbuf = std::move(eye);
      cur = curbuf.as<T>();
    } else if (f.identity) {
      std::fill(cp, cp + m * f.r, T(0));
      for (size_t i = 0; i < m; ++i) cp[i * f.r + i] = T(1);
    } else {
      for (size_t i = 0; i < m * f.r; ++i) cp[i] = static_cast<T>(f.Q[i]);
      Buffer next = project(f, cur, m, N);
      curbuf = std::move(next);
      cur = curbuf.as<T>();
    }
    res.cores.push_back(std::move(core));
    res.ranks.push_back(f.r);
    rprev = f.r;
    rest = N;
  }
  // The last remainder is the last core.
  Buffer last;
  if (cur == data) {
    last = alloc_buffer(rprev * rest, sizeof(T));
    std::memcpy(last.p, data, rprev * rest * sizeof(T));
  } else {
    last = std::move(curbuf);
  }
  res.cores.push_back(std::move(last));
  res.ranks.push_back(1);
  return true;
}

// kPrecise pass: QR + one-sided Jacobi per unfolding, remainders kept in float64.
template <typename T>
void precise_pass(const T* data, size_t n, const std::vector<size_t>& modes, double delta2, size_t max_rank,
                  TTResult& res, bool& capped) {
  size_t d = modes.size();
  res = TTResult();
  res.ranks.assign(1, 1);
  capped = false;
  std::vector<double> cur(data, data + n), rem;
  size_t rprev = 1, rest = n;
  for (size_t k = 0; k + 1 < d; ++k) {
    size_t m = rprev * modes[k], N = rest / modes[k];
    Factor f = factor_precise(cur.data(), m, N, delta2, max_rank, rem);
    capped = capped || f.capped;
    Buffer core = alloc_buffer(m * f.r, sizeof(T));
    T* cp = core.as<T>();
    for (size_t i = 0; i < m * f.r; ++i) cp[i] = static_cast<T>(f.Q[i]);
    res.cores.push_back(std::move(core));
    res.ranks.push_back(f.r);
    cur.swap(rem);
    rprev = f.r;
    rest = N;
  }
  Buffer last = alloc_buffer(rprev * rest, sizeof(T));
  for (size_t i = 0; i < rprev * rest; ++i) last.as<T>()[i] = static_cast<T>(cur[i]);
  res.cores.push_back(std::move(last));
  res.ranks.push_back(1);
}

// A TT equal to the data: identity cores around one core that holds the data itself (left
// identities while the prefix is the smaller side, right identities after). The last resort of
// the repair: its reconstruction is the data exactly (x * 1 plus exact zeros).
template <typename T>
void exact_tt(const T* data, size_t n, const std::vector<size_t>& modes, TTResult& res) {
  size_t d = modes.size();
  std::vector<double> M(d + 1, 1), Nr(d + 1, 1);
  for (size_t k = 0; k < d; ++k) M[k + 1] = M[k] * double(modes[k]);
  for (size_t k = d; k-- > 0;) Nr[k] = Nr[k + 1] * double(modes[k]);
  size_t best = 0;
  double bestc = std::numeric_limits<double>::infinity();
  for (size_t s = 0; s < d; ++s) {
    double c = double(n);
    for (size_t k = 0; k < s; ++k) c += M[k + 1] * M[k + 1];
    for (size_t k = s + 1; k < d; ++k) c += Nr[k] * Nr[k];
    if (c < bestc) {
      bestc = c;
      best = s;
    }
  }
  res = TTResult();
  res.ranks.assign(d + 1, 1);
  for (size_t k = 1; k <= best; ++k) res.ranks[k] = size_t(M[k]);
  for (size_t k = best + 1; k < d; ++k) res.ranks[k] = size_t(Nr[k]);
  for (size_t k = 0; k < d; ++k) {
    size_t r0 = res.ranks[k], nk = modes[k], r1 = res.ranks[k + 1], len = r0 * nk * r1;
    Buffer b = alloc_buffer(len, sizeof(T));
    T* c = b.as<T>();
    if (k == best) {
      std::memcpy(c, data, n * sizeof(T));
    } else {
      std::fill(c, c + len, T(0));
      // left: [a][i][a*nk + i] = 1; right: [i*r1 + b][i][b] = 1
      if (k < best)
        for (size_t a = 0; a < r0; ++a)
          for (size_t i = 0; i < nk; ++i) c[(a * nk + i) * r1 + a * nk + i] = T(1);
      else
        for (size_t i = 0; i < nk; ++i)
          for (size_t b2 = 0; b2 < r1; ++b2) c[((i * r1 + b2) * nk + i) * r1 + b2] = T(1);
    }
    res.cores.push_back(std::move(b));
  }
}

// Largest magnitude (NaN when x holds NaN or infinities) and sum of squares (float64, which
// overflows for float64 data beyond about 1e150) of x in one pass.
template <typename T>
void scan(const T* x, size_t n, double& amax, double& ss) {
  size_t nb = (n + kChunk - 1) / kChunk;
  std::vector<double> mx(nb), sq(nb);
  parallel_for(nb, [&](size_t i) {
    size_t s = i * kChunk;
    scank(x + s, std::min(kChunk, n - s), &mx[i], &sq[i]);
  });
  amax = 0;
  ss = 0;
  for (size_t i = 0; i < nb; ++i) {
    amax = std::isnan(mx[i]) || std::isnan(amax) ? mx[i] + amax : std::max(amax, mx[i]);
    ss += sq[i];
  }
}

// Largest magnitude of x, NaN when x is not finite.
template <typename T>
double max_abs(const T* x, size_t n) {
  double amax = 0, ss = 0;
  scan(x, n, amax, ss);
  return amax;
}

// x * 2^e, exact in the working type unless the result leaves its range (two factors so that
// 2^e itself need not be representable).
template <typename T>
void scale_pow2(T* x, size_t n, int e) {
  int e1 = e / 2, e2 = e - e1;
  double f1 = std::ldexp(1.0, e1), f2 = std::ldexp(1.0, e2);
  parallel_for((n + kChunk - 1) / kChunk, [&](size_t i) {
    size_t s = i * kChunk, end = std::min(n, s + kChunk);
    for (size_t j = s; j < end; ++j) x[j] = static_cast<T>(double(x[j]) * f1 * f2);
  });
}

// Multiplies the TT by 2^e, shared out over the cores so that each stays within range.
template <typename T>
void unscale_cores(TTResult& res, const std::vector<size_t>& modes, int e) {
  size_t d = res.cores.size();
  std::vector<int> lg(d);
  long sum = 0;
  for (size_t k = 0; k < d; ++k) {
    size_t len = res.ranks[k] * modes[k] * res.ranks[k + 1];
    double m = max_abs(res.cores[k].as<T>(), len);
    lg[k] = m > 0 ? std::ilogb(m) : 0;
    sum += lg[k];
  }
  double target = double(sum + e) / double(d);
  int used = 0;
  for (size_t k = 0; k < d; ++k) {
    int ek = k + 1 < d ? int(std::lround(target - lg[k])) : e - used;
    used += ek;
    size_t len = res.ranks[k] * modes[k] * res.ranks[k + 1];
    if (ek) scale_pow2(res.cores[k].as<T>(), len, ek);
  }
}

}  // namespace

template <typename T>
TTResult tt_compress(const T* data, size_t n, const std::vector<size_t>& modes, double tol, size_t max_rank,
                     double min_ratio) {
  size_t d = modes.size();
  size_t prod = 1;
  for (size_t m : modes) prod = checked_mul(prod, m, "modes");
  if (d == 0 || prod != n) throw TTError("bad_request", "modes", "modes must multiply to the length of data");
  if (!(tol > 0 && tol < 1)) throw TTError("bad_request", "tolerance", "tolerance must be between 0 and 1");
  if (max_rank < 1) throw TTError("bad_request", "max_rank", "max_rank must be at least 1");
  const bool f32 = std::is_same_v<T, float>;
  // The largest magnitude and the norm. For float32 data with prefix steps, from the pass that
  // forms their Gram matrix (float64 holds the squares of any float32 value, so the matrix needs
  // no scaling): the norm is its trace.
  double amax = 0, norm2 = 0;
  std::vector<double> gram;
  const size_t pre_p = prefix_length(modes, n);
  if (f32 && pre_p >= 2) {
    size_t Mp = 1;
    for (size_t k = 0; k < pre_p; ++k) Mp *= modes[k];
    gram.assign(Mp * Mp, 0.0);
    gram_rows(data, Mp, n / Mp, gram.data(), &amax);
    for (size_t i = 0; i < Mp; ++i) norm2 += gram[i * Mp + i];
  } else {
    scan(data, n, amax, norm2);
  }
  if (!std::isfinite(amax) || (!gram.empty() && !std::isfinite(norm2)))
    throw TTError("bad_request", "data", "data must contain only finite numbers");
  if (amax == 0) throw TTError("bad_request", "data", "data must not be all zeros");

  TTResult res;
  res.ranks.assign(1, 1);
  if (d == 1) {
    // The one core is the data: ratio 1.
    if (min_ratio > 1) {
      res.gave_up = true;
      return res;
    }
    Buffer c = alloc_buffer(n, sizeof(T));
    std::memcpy(c.p, data, n * sizeof(T));
    res.cores.push_back(std::move(c));
    res.ranks.push_back(1);
    res.relative_error = 0;
    return res;
  }
  // Data far from 1 in magnitude (float32 near 1e38 or subnormal, float64 near 1e-200) are
  // decomposed as data * 2^-e, which is exact, so that remainders neither overflow nor lose
  // precision to underflow; 2^e is shared out over the cores afterwards.
  int e = std::ilogb(amax);
  const int lim = f32 ? 64 : 400;
  const bool scaled = e > lim || e < -lim;
  const T* work = data;
  Buffer sbuf;
  if (scaled) {
    sbuf = alloc_buffer(n, sizeof(T));
    std::memcpy(sbuf.p, data, n * sizeof(T));
    scale_pow2(sbuf.as<T>(), n, -e);
    work = sbuf.as<T>();
  } else {
    e = 0;
  }
  if (scaled) {
    norm2 = sumsq(work, n);
    gram.clear();
  }
  if (!std::isfinite(norm2)) throw TTError("bad_request", "data", "data must contain only finite numbers");

  // The truncation budget leaves room for the rounding of the cores and of the reconstruction
  // in the working type; it matters only near the type's precision.
  const double unit = f32 ? 0x1.0p-24 : 0x1.0p-53;
  const double reserve = 4 * unit * std::sqrt(double(d));
  double tol_t = std::sqrt(std::max(tol * tol - reserve * reserve, 0.25 * tol * tol));
  const double per_step = norm2 / double(d - 1);
  RankProbe probe;
  RankProbe* pp = nullptr;
  if (min_ratio > 0) {
    probe.modes = modes;
    probe.n = n;
    probe.cap = std::max<size_t>(max_rank, 1);
    probe.delta2 = tol_t * tol_t * per_step;
    probe.margin = 1e-12 * norm2;
    probe.M.assign(d + 1, 1);
    for (size_t k = 1; k <= d; ++k) probe.M[k] = probe.M[k - 1] * modes[k - 1];
    probe.w.assign(d + 1, {});
    if (probe_gives_up(work, probe, min_ratio)) {
      res.gave_up = true;
      return res;
    }
    pp = &probe;
  }
  // Start on the fastest route the tolerance allows; whenever the measured error exceeds the
  // tolerance without max_rank binding, redo the decomposition on the next, more accurate route
  // (twice on the last, with the budget shrunk by the overshoot), and as a last resort return
  // the data as an exact TT. Only a binding max_rank returns an error above the tolerance.
  Route route = f32 ? (tol < 1e-5 ? kExact : kFast) : (tol < 1e-7 ? kPrecise : kFast);
  int precise_tries = 0;
  for (;;) {
    bool capped = false;
    double delta2 = tol_t * tol_t * per_step;
    if (route == kPrecise) {
      precise_pass(work, n, modes, delta2, max_rank, res, capped);
      ++precise_tries;
    } else if (!svd_pass(work, n, modes, delta2, max_rank, route, pp, min_ratio, gram, res, capped)) {
      TTResult gave;
      gave.gave_up = true;
      return gave;
    }
    pp = nullptr;  // the rank bounds hold for the first pass's truncations only
    if (scaled) unscale_cores<T>(res, modes, e);
    std::vector<const T*> cps;
    for (auto& c : res.cores) cps.push_back(c.as<T>());
    res.relative_error = measure_error(data, n, cps, modes, res.ranks, norm2, -e);
    if (res.relative_error <= tol || capped) break;
    if (route == kPrecise && precise_tries >= 2) {
      exact_tt(data, n, modes, res);
      std::vector<const T*> ex;
      for (auto& c : res.cores) ex.push_back(c.as<T>());
      res.relative_error = measure_error(data, n, ex, modes, res.ranks, norm2, -e);
      break;
    }
    if (route == kPrecise) tol_t *= std::min(0.9, 0.9 * tol / res.relative_error);
    else route = Route(route + 1);
  }
  if (min_ratio > 0) {
    size_t size = 0;
    for (size_t k = 0; k < d; ++k) size += res.ranks[k] * modes[k] * res.ranks[k + 1];
    if (double(n) / double(size) < min_ratio) {
      TTResult gave;
      gave.gave_up = true;
      return gave;
    }
  }
  return res;
}

template <typename T>
Buffer tt_reconstruct(const std::vector<const T*>& cores, const std::vector<size_t>& modes,
                      const std::vector<size_t>& ranks, const std::vector<size_t>& shape,
                      const std::vector<size_t>& groups, const std::vector<std::pair<size_t, size_t>>& ranges) {
  std::vector<CoreRef<T>> refs;
  std::vector<std::vector<T>> owned;
  size_t total = 1, mi = 0;
  for (size_t j = 0; j < shape.size(); ++j) {
    size_t s = 0, e = shape[j];
    if (!ranges.empty()) {
      s = ranges[j].first;
      e = ranges[j].second;
    }
    if (s >= e || e > shape[j])
      throw TTError("bad_request", "slice", "slice ranges must satisfy 0 <= start < stop <= size");
    total = checked_mul(total, e - s, "slice");
    size_t g = groups[j];
    if (s == 0 && e == shape[j]) {
      for (size_t t = 0; t < g; ++t, ++mi) refs.push_back({cores[mi], ranks[mi], modes[mi], ranks[mi + 1]});
      continue;
    }
    size_t rin = ranks[mi], rout = ranks[mi + g], len = e - s;
    owned.emplace_back(checked_mul(checked_mul(rin, len, "slice"), rout, "slice"));
    T* dst = owned.back().data();
    if (g == 1) {
      const T* c = cores[mi];
      size_t n = modes[mi];
      for (size_t a = 0; a < rin; ++a)
        std::memcpy(dst + a * len * rout, c + (a * n + s) * rout, len * rout * sizeof(T));
    } else {
      // Merge the group's factor cores for each index in [s, e): prefix products along the
      // mixed-radix digits, recomputed only from the first digit that changed.
      std::vector<size_t> n(g), rk(g + 1), dig(g, SIZE_MAX);
      for (size_t t = 0; t < g; ++t) n[t] = modes[mi + t];
      for (size_t t = 0; t <= g; ++t) rk[t] = ranks[mi + t];
      std::vector<std::vector<double>> pre(g);
      std::vector<size_t> cd(g);
      for (size_t i = s; i < e; ++i) {
        size_t x = i;
        for (size_t t = g; t-- > 0;) {
          cd[t] = x % n[t];
          x /= n[t];
        }
        size_t from = 0;
        while (from < g && cd[from] == dig[from]) ++from;
        for (size_t t = from; t < g; ++t) {
          dig[t] = cd[t];
          const T* c = cores[mi + t];
          std::vector<double>& P = pre[t];
          P.assign(rin * rk[t + 1], 0.0);
          if (t == 0) {
            for (size_t a = 0; a < rin; ++a)
              for (size_t b = 0; b < rk[1]; ++b) P[a * rk[1] + b] = double(c[(a * n[0] + cd[0]) * rk[1] + b]);
          } else {
            const std::vector<double>& Pp = pre[t - 1];
            for (size_t a = 0; a < rin; ++a)
              for (size_t q = 0; q < rk[t]; ++q) {
                double v = Pp[a * rk[t] + q];
                if (v == 0) continue;
                const T* row = c + (q * n[t] + cd[t]) * rk[t + 1];
                double* out = &P[a * rk[t + 1]];
                for (size_t b = 0; b < rk[t + 1]; ++b) out[b] += v * double(row[b]);
              }
          }
        }
        const std::vector<double>& F = pre[g - 1];
        for (size_t a = 0; a < rin; ++a)
          for (size_t b = 0; b < rout; ++b) dst[(a * len + (i - s)) * rout + b] = static_cast<T>(F[a * rout + b]);
      }
    }
    refs.push_back({dst, rin, len, rout});
    mi += g;
  }
  Buffer out = alloc_buffer(total, sizeof(T));
  contract_chain(refs, out.as<T>());
  return out;
}

template <typename T>
TTResult tt_round(const std::vector<const T*>& cores_in, const std::vector<size_t>& ranks_in,
                  const std::vector<size_t>& modes, double tol, size_t max_rank) {
  size_t d = modes.size();
  // The cores scaled by powers of two to largest magnitudes in [1, 2) (exact), so that the norms
  // below stay within float64's range whatever the tensor's magnitude; the scale goes back
  // onto the result's cores at the end.
  std::vector<std::vector<T>> scaled;
  long escale = 0;
  bool nonfinite = false;
  if (!scaled_cores(cores_in, ranks_in, modes, scaled, escale, nonfinite)) {
    if (nonfinite) throw TTError("bad_request", "cores", "cores must hold finite numbers");
    throw TTError("bad_request", "cores", "the tensor must not be zero");
  }
  const std::vector<const T*> cores = ptrs_of(scaled);
  std::vector<size_t> r = ranks_in;
  std::vector<std::vector<double>> c(d);
  for (size_t k = 0; k < d; ++k) {
    size_t len = r[k] * modes[k] * r[k + 1];
    c[k].assign(cores[k], cores[k] + len);
  }
  double orig2 = unfold(tt_dot(cores, ranks_in, cores, ranks_in, modes));
  if (!std::isfinite(orig2)) throw TTError("bad_request", "cores", "cores must hold finite numbers");
  if (orig2 <= 0) throw TTError("bad_request", "cores", "the tensor must not be zero");
  // Right-to-left orthogonalisation: core k becomes right-orthonormal, R moves into core k-1.
  for (size_t k = d - 1; k >= 1; --k) {
    size_t n = modes[k], m = r[k], cols = n * r[k + 1];
    std::vector<double> Ct(cols * m);
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < cols; ++j) Ct[j * m + i] = c[k][i * cols + j];
    std::vector<double> Q, R;
    qr(cols, m, Ct.data(), Q, R);  // Ct = Q R, C = R^T Q^T
    size_t kk = std::min(cols, m);
    std::vector<double> nc(kk * cols);
    for (size_t i = 0; i < cols; ++i)
      for (size_t j = 0; j < kk; ++j) nc[j * cols + i] = Q[i * kk + j];
    size_t rows = r[k - 1] * modes[k - 1];
    std::vector<double> prev(rows * kk);
    gemm<double, double, double>(rows, kk, m, c[k - 1].data(), m, 1, R.data(), 1, m, prev.data(), kk, false);
    c[k].swap(nc);
    c[k - 1].swap(prev);
    r[k] = kk;
  }
  double nrm2 = 0;
  for (double v : c[0]) nrm2 += v * v;
  // float32 cores round at 6e-8 per element: their share of the tolerance is kept out of the
  // truncation budget (it matters only near float32's precision)
  const double reserve = std::is_same_v<T, float> ? 4 * 0x1.0p-24 * std::sqrt(double(d)) : 0.0;
  const double tol_t = std::sqrt(std::max(tol * tol - reserve * reserve, 0.25 * tol * tol));
  double delta2 = d > 1 ? tol_t * tol_t * nrm2 / double(d - 1) : 0;
  double discarded = 0;
  bool capped = false;
  for (size_t k = 0; k + 1 < d; ++k) {
    size_t m = r[k] * modes[k], N = r[k + 1];
    std::vector<double> Rm;
    Factor f;
    if (std::min(m, N) <= kMaxJacobi) {
      f = factor_precise(c[k].data(), m, N, delta2, max_rank, Rm);
    } else {
      // Large ranks: the Gram route (O(n^3) once instead of Jacobi sweeps), precise to ~1e-8.
      f = factor_step(c[k].data(), m, N, delta2, max_rank);
      if (f.identity) {
        f.Q.assign(m * m, 0.0);
        for (size_t i = 0; i < m; ++i) f.Q[i * m + i] = 1.0;
      }
      Rm.assign(f.r * N, 0.0);
      gemm<double, double, double>(f.r, N, m, f.Q.data(), 1, f.r, c[k].data(), N, 1, Rm.data(), N, false);
    }
    discarded += f.discarded;
    capped = capped || f.capped;
    size_t cols = modes[k + 1] * r[k + 2];
    std::vector<double> next(f.r * cols);
    gemm<double, double, double>(f.r, cols, N, Rm.data(), N, 1, c[k + 1].data(), cols, 1, next.data(), cols, false);
    c[k].swap(f.Q);
    c[k + 1].swap(next);
    r[k + 1] = f.r;
  }
  TTResult res;
  res.ranks = r;
  for (size_t k = 0; k < d; ++k) {
    Buffer b = alloc_buffer(c[k].size(), sizeof(T));
    T* p = b.as<T>();
    for (size_t i = 0; i < c[k].size(); ++i) p[i] = static_cast<T>(c[k][i]);
    res.cores.push_back(std::move(b));
  }
  std::vector<const T*> out;
  for (auto& b : res.cores) out.push_back(b.as<T>());
  if constexpr (std::is_same_v<T, double>) {
    // The truncations act on orthonormal frames, so the squared error is exactly the discarded
    // energy; summing it avoids the cancellation of |t|^2 + |s|^2 - 2<t,s> at small errors.
    res.relative_error = std::sqrt(discarded / nrm2);
  } else {
    // float32 cores add their own rounding, so compare the stored result with the input.
    double new2 = unfold(tt_dot(out, r, out, r, modes));
    double cross = unfold(tt_dot(cores, ranks_in, out, r, modes));
    res.relative_error = std::sqrt(std::max(0.0, orig2 + new2 - 2 * cross) / orig2);
  }
  if (res.relative_error > tol && !capped) {
    // Never a violation without a binding max_rank: the input itself is within any tolerance.
    TTResult same;
    same.ranks = ranks_in;
    for (size_t k = 0; k < d; ++k) {
      size_t len = ranks_in[k] * modes[k] * ranks_in[k + 1];
      Buffer b = alloc_buffer(len, sizeof(T));
      std::memcpy(b.p, cores_in[k], len * sizeof(T));
      same.cores.push_back(std::move(b));
    }
    same.relative_error = 0;
    return same;
  }
  if (escale != 0) unscale_cores<T>(res, modes, int(escale));
  return res;
}

#define SVC_T(T)                                                                                                      \
  template TTResult tt_compress<T>(const T*, size_t, const std::vector<size_t>&, double, size_t, double);             \
  template Buffer tt_reconstruct<T>(const std::vector<const T*>&, const std::vector<size_t>&,                         \
                                    const std::vector<size_t>&, const std::vector<size_t>&,                           \
                                    const std::vector<size_t>&, const std::vector<std::pair<size_t, size_t>>&);       \
  template TTResult tt_round<T>(const std::vector<const T*>&, const std::vector<size_t>&, const std::vector<size_t>&, \
                                double, size_t);
SVC_T(float)
SVC_T(double)
}  // namespace svc
