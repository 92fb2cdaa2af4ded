// Batched top-K: the scores of one resident query against many resident candidates come from
// the TT x TT kernel (native/cuda/dot.cu) in one launch; the metric and the selection of the
// k best run on the host over the copied scores (8 bytes per candidate).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "common.cuh"

namespace svc {
namespace gpu {

void dot_scores(uint64_t query, const std::vector<uint64_t>& cands, double* out);

size_t topk(uint64_t query, const std::vector<uint64_t>& cands, const std::vector<double>& norms,
            const std::string& metric, size_t k, uint32_t* index, double* score) {
  bool lower = metric == "l2";
  if (metric != "dot" && metric != "cosine" && !lower)
    throw TTError("bad_request", "metric", "metric must be cosine, dot or l2");
  if (metric != "dot" && norms.size() != cands.size() + 1)
    throw TTError("bad_request", "norms", "norms must hold the query's norm then one per candidate");
  std::vector<double> s(cands.size());
  dot_scores(query, cands, s.data());
  for (size_t j = 0; j < s.size(); ++j) {
    if (metric == "cosine") {
      double den = norms[0] * norms[j + 1];
      // within [-1, 1]: rounding of the product and the norms can pass 1 by a few ulps
      s[j] = den > 0 ? std::min(1.0, std::max(-1.0, s[j] / den)) : 0.0;
    } else if (lower) {
      s[j] = std::sqrt(std::max(0.0, norms[0] * norms[0] + norms[j + 1] * norms[j + 1] - 2 * s[j]));
    }
  }
  std::vector<uint32_t> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0u);
  size_t n = std::min(k, idx.size());
  // best first; ties by candidate order, so the answer is deterministic
  auto better = [&](uint32_t a, uint32_t b) {
    if (s[a] != s[b]) return lower ? s[a] < s[b] : s[a] > s[b];
    return a < b;
  };
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), better);
  for (size_t j = 0; j < n; ++j) {
    index[j] = idx[j];
    score[j] = s[idx[j]];
  }
  return n;
}

}  // namespace gpu
}  // namespace svc
