// Rank probing for min_ratio: sampled blocks of every unfolding and the size bounds they give.
#include "rank_probe.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "gemm.h"
#include "linalg.h"
#include "threads.h"
#include "tt_util.h"

namespace svc {
namespace tt_detail {

// Rows/columns sampled per unfolding for the min_ratio rank lower bounds.
constexpr size_t kSample = 256;

namespace {
std::vector<size_t> stratified(size_t total, size_t want, uint64_t seed) {
  std::vector<size_t> idx;
  if (total <= want) {
    idx.resize(total);
    std::iota(idx.begin(), idx.end(), 0);
    return idx;
  }
  uint64_t s = seed;
  for (size_t i = 0; i < want; ++i) {
    size_t lo = i * total / want, hi = (i + 1) * total / want;
    idx.push_back(lo + splitmix(s) % (hi - lo));
  }
  return idx;
}
}  // namespace

template <typename T>
bool probe_gives_up(const T* data, RankProbe& P, double min_ratio) {
  size_t d = P.modes.size(), n = P.n;
  std::vector<size_t> order;
  for (size_t k = 1; k < d; ++k) order.push_back(k);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return P.smax(a) > P.smax(b); });
  const size_t smax_sample = 2 * kSample;
  // Samples unfolding k with blocks of S rows and columns; returns whether a larger block there
  // could show a larger rank.
  auto sample = [&](size_t k, size_t S) -> bool {
    size_t Mk = P.M[k], Nn = n / Mk;
    std::vector<size_t> rows = stratified(Mk, S, 0x5eed0000 + 2 * k);
    std::vector<size_t> cols = stratified(Nn, S, 0x5eed0001 + 2 * k);
    size_t sr = rows.size(), sc = cols.size();
    std::vector<double> sub(sr * sc);
    for (size_t a = 0; a < sr; ++a) {
      const T* row = data + rows[a] * Nn;
      for (size_t b = 0; b < sc; ++b) sub[a * sc + b] = double(row[cols[b]]);
    }
    size_t g = std::min(sr, sc);
    std::vector<double> G(g * g), w(g);
    if (sr <= sc) gemm<double, double, double>(sr, sr, sc, sub.data(), sc, 1, sub.data(), 1, sc, G.data(), g, false);
    else gemm<double, double, double>(sc, sc, sr, sub.data(), 1, sc, sub.data(), sc, 1, G.data(), g, false);
    symmetrize(G.data(), g);
    sym_eig(g, G.data(), w.data(), nullptr);
    P.w[k] = w;
    size_t r = P.rho(k, double(k) * P.delta2);
    // no larger rank can show: the whole unfolding, the largest block, a block as large as the
    // unfolding's rank can be, or a sample whose rank is well below its size
    return !((sr == Mk && sc == Nn) || S >= smax_sample || g >= P.smax(k) || 2 * r < g);
  };
  std::vector<char> saturated(d, 0);  // not vector<bool>: written from several threads below
  std::vector<size_t> side(d, 64);
  for (size_t k : order) {
    saturated[k] = sample(k, 64) ? 1 : 0;
    if (P.unreachable(min_ratio)) return true;
  }
  // Larger samples of the saturated unfoldings only help if ranks as large as such a sample can
  // show would decide: take the smallest size that would, sample them at it, middle first, and
  // look again.
  for (;;) {
    size_t S = 0;
    for (size_t cand = 128; cand <= smax_sample && S == 0; cand *= 2) {
      P.boost.assign(d, 0);
      bool any = false;
      for (size_t k : order)
        if (saturated[k] && side[k] < cand) P.boost[k] = cand, any = true;
      if (any && P.unreachable(min_ratio)) S = cand;
      P.boost.clear();
    }
    if (S == 0) return false;
    std::vector<size_t> grow;
    for (size_t k : order)
      if (saturated[k] && side[k] < S) grow.push_back(k);
    // As many samples at once as the pool has threads (each eigensolve is sequential), middle
    // first; the bound is checked after each group.
    const size_t group = std::max<size_t>(1, size_t(pool_threads()));
    for (size_t g0 = 0; g0 < grow.size(); g0 += group) {
      size_t g1 = std::min(grow.size(), g0 + group);
      parallel_for(g1 - g0, [&](size_t i) {
        size_t k = grow[g0 + i];
        side[k] = S;
        saturated[k] = sample(k, S) ? 1 : 0;
      });
      if (P.unreachable(min_ratio)) return true;
    }
  }
  return false;
}

template bool probe_gives_up<float>(const float*, RankProbe&, double);
template bool probe_gives_up<double>(const double*, RankProbe&, double);

}  // namespace tt_detail
}  // namespace svc
