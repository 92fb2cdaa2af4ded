// Dense contraction of a chain of TT cores (two dense halves and one GEMM), shared by compress, reconstruct and dot.
#pragma once
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

#include "gemm.h"
#include "tt_util.h"

namespace svc {
namespace tt_detail {

template <typename T>
struct CoreRef {
  const T* p;
  size_t r0, n, r1;
};

// Split point s of a chain: left part = cores [0, s), right part = cores [s, d), chosen so the
// two dense halves (P_s x r_s and r_s x Q_s) are as small as possible.
template <typename T>
size_t best_split(const std::vector<CoreRef<T>>& cs) {
  size_t d = cs.size();
  std::vector<double> P(d + 1, 1.0), Qs(d + 1, 1.0);
  for (size_t k = 0; k < d; ++k) P[k + 1] = P[k] * double(cs[k].n);
  for (size_t k = d; k-- > 0;) Qs[k] = Qs[k + 1] * double(cs[k].n);
  size_t best = 1;
  double bestc = std::numeric_limits<double>::infinity();
  for (size_t s = 1; s < d; ++s) {
    double c = P[s] * double(cs[s].r0) + double(cs[s].r0) * Qs[s];
    if (c < bestc) {
      bestc = c;
      best = s;
    }
  }
  return best;
}

// Dense left half: cores [0, s) as a (n_0...n_{s-1}) x r_s matrix; returns it and its rows.
template <typename T>
const T* left_chain(const std::vector<CoreRef<T>>& cs, size_t s, std::vector<T>& buf, size_t& rows) {
  std::vector<T> tmp;
  const T* L = cs[0].p;
  rows = cs[0].n;
  for (size_t k = 1; k < s; ++k) {
    const auto& c = cs[k];
    tmp.resize(checked_mul(rows, c.n * c.r1, "cores"));
    gemm<T, T, T>(rows, c.n * c.r1, c.r0, L, c.r0, 1, c.p, c.n * c.r1, 1, tmp.data(), c.n * c.r1, false);
    buf.swap(tmp);
    L = buf.data();
    rows *= c.n;
  }
  return L;
}

// Dense right half: cores [s, d) as an r_s x (n_s...n_{d-1}) matrix; returns it and its columns.
template <typename T>
const T* right_chain(const std::vector<CoreRef<T>>& cs, size_t s, std::vector<T>& buf, size_t& cols) {
  size_t d = cs.size();
  std::vector<T> tmp;
  const T* R = cs[d - 1].p;
  cols = cs[d - 1].n;
  for (size_t k = d - 1; k-- > s;) {
    const auto& c = cs[k];
    tmp.resize(checked_mul(c.r0 * c.n, cols, "cores"));
    gemm<T, T, T>(c.r0 * c.n, cols, c.r1, c.p, c.r1, 1, R, cols, 1, tmp.data(), cols, false);
    buf.swap(tmp);
    R = buf.data();
    cols *= c.n;
  }
  return R;
}

// Dense contraction of a chain of (contiguous) cores into out, C order over their mode indices:
// out = L_s R_s, one GEMM with inner dimension r_s over the two dense halves.
template <typename T>
void contract_chain(const std::vector<CoreRef<T>>& cs, T* out) {
  size_t d = cs.size();
  if (d == 1) {
    std::memcpy(out, cs[0].p, cs[0].n * sizeof(T));
    return;
  }
  size_t s = best_split(cs), rows = 0, cols = 0;
  std::vector<T> lbuf, rbuf;
  const T* L = left_chain(cs, s, lbuf, rows);
  const T* R = right_chain(cs, s, rbuf, cols);
  size_t rs = cs[s].r0;
  gemm<T, T, T>(rows, cols, rs, L, rs, 1, R, cols, 1, out, cols, false);
}

template <typename T>
std::vector<CoreRef<T>> full_refs(const std::vector<const T*>& cores, const std::vector<size_t>& modes,
                                  const std::vector<size_t>& ranks) {
  std::vector<CoreRef<T>> v;
  for (size_t k = 0; k < modes.size(); ++k) v.push_back({cores[k], ranks[k], modes[k], ranks[k + 1]});
  return v;
}

}  // namespace tt_detail
}  // namespace svc
