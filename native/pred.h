// "pred": an error-bounded, prediction-based codec for float32/float64 arrays of any rank.
// Blocks are coded independently (interpolation or Lorenzo prediction, linear quantisation,
// rANS), so a slice decodes only the blocks it touches. docs/codecs.md describes the stream.
// Hostile streams throw TTError("bad_request", "stream", ...); nothing is allocated before
// its length has been checked against the header and the stream size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "tt.h"

namespace svc {

struct PredStream {
  std::vector<uint8_t> bytes;
  double relative_error = 0;  // of the reconstruction the decoder reproduces bit for bit, float64
  double max_abs_error = 0;   // of that reconstruction
};

// tolerance < 0: no Frobenius bound; max_abs < 0: no pointwise bound (one of them is >= 0).
// max_abs == 0 or tolerance == 0 (or data of zero norm under a tolerance) is lossless.
template <typename T>
PredStream pred_compress(const T* data, const std::vector<size_t>& shape, double tolerance, double max_abs);

// Estimated compression ratio from a few sampled sub-blocks (no tolerance loop).
template <typename T>
double pred_estimate(const T* data, const std::vector<size_t>& shape, double tolerance, double max_abs);

struct PredInfo {
  bool f64 = false;
  bool lossless = false;
  double max_abs_error = 0;         // the pointwise bound every element honours
  std::vector<size_t> shape;        // as given to compress
  std::vector<size_t> block_shape;  // over the internal shape (size-1 dimensions dropped, rank <= 5)
  std::vector<size_t> inner_shape;  // the internal shape
  size_t blocks = 0;
};

// Parses and checks the header and the block table.
PredInfo pred_info(const uint8_t* s, size_t n);

// Decodes the whole array (ranges empty) or ranges[j] = [start, stop) per dimension of the
// original shape, C order. Returns float32 or float64 elements (info.f64).
Buffer pred_decompress(const uint8_t* s, size_t n, const std::vector<std::pair<size_t, size_t>>& ranges);

// How decoded values are rounded before they meet the dense operand: as they are, or to the
// float16 / bfloat16 values the store serves for entries of those dtypes (nearest even).
enum class PredRound : uint8_t { kNone = 0, kFloat16 = 1, kBfloat16 = 2 };

struct PredDotItem {
  const uint8_t* stream = nullptr;
  size_t size = 0;
  PredRound round = PredRound::kNone;
};

struct PredDotResult {
  Scaled dot;       // <decoded, x>, float64 accumulation (scaled where it leaves float64's range)
  Scaled distance;  // ||decoded - x|| (scaled against overflow), when asked for
};

// <decoded stream, x> for each stream (x: nx elements, C order over each stream's shape),
// decoded block by block on the pool's threads: a block's values are dropped once its rows have
// met x's, so memory is one block per thread whatever the size of the arrays. Every stream is
// parsed (and refused when corrupt) before any is decoded.
template <typename TX>
std::vector<PredDotResult> pred_dot(const std::vector<PredDotItem>& items, const TX* x, size_t nx, bool distance);

}  // namespace svc
