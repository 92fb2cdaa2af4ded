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

}  // namespace svc
