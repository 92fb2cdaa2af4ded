// Tensor-train arithmetic on raw buffers: TT-SVD, block reconstruction, inner products, rounding.
// Inputs are validated in TypeScript; the checks here are a backstop and throw TTError.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "alloc.h"

namespace svc {

// An error with the stable code the TypeScript layer maps to its error classes.
struct TTError : std::runtime_error {
  std::string code;   // "bad_request" or "internal"
  std::string field;  // the offending input, when known
  TTError(std::string c, std::string f, const std::string& msg)
      : std::runtime_error(msg), code(std::move(c)), field(std::move(f)) {}
};

struct TTResult {
  bool gave_up = false;  // min_ratio was unreachable
  std::vector<size_t> ranks;
  std::vector<Buffer> cores;
  double relative_error = 0;
};

// A result kept as m * 2^e, for inner products and norms of data near float64's limits: the value
// itself, or the sums on the way to it, may lie outside float64's range. e is 0 and m the value
// wherever the value is a normal float64 between 2^-1000 and 2^1000; else |m| is in [0.5, 1).
// m is NaN when an input holds NaN or infinities.
struct Scaled {
  double m = 0;
  int e = 0;
};

template <typename T>
TTResult tt_compress(const T* data, size_t n, const std::vector<size_t>& modes, double tol, size_t max_rank,
                     double min_ratio);

// Dense block over the dense shape: modes are grouped per dense dimension (groups[j] modes for
// dimension j, in order); ranges[j] = [start, stop) or the whole dimension when ranges is empty.
template <typename T>
Buffer tt_reconstruct(const std::vector<const T*>& cores, const std::vector<size_t>& modes,
                      const std::vector<size_t>& ranks, const std::vector<size_t>& shape,
                      const std::vector<size_t>& groups, const std::vector<std::pair<size_t, size_t>>& ranges);

// The inner products below run on the data as they are, and again on copies scaled by powers of
// two (exact) where that first pass overflows or comes out below 2^-900.
template <typename TA, typename TB>
Scaled tt_dot(const std::vector<const TA*>& a, const std::vector<size_t>& ra, const std::vector<const TB*>& b,
              const std::vector<size_t>& rb, const std::vector<size_t>& modes);

// x scaled to a largest magnitude in [1, 2), made once and shared by the candidates of a batch
// (only where one of them needs it).
template <typename TX>
struct ScaledCopy {
  bool ready = false;
  std::vector<TX> x;
  int e = 0;
  bool zero = false, nonfinite = false;
};

template <typename TC, typename TX>
Scaled tt_dot_dense(const std::vector<const TC*>& cores, const std::vector<size_t>& ranks,
                    const std::vector<size_t>& modes, const TX* x, ScaledCopy<TX>* cache = nullptr);

template <typename T>
TTResult tt_round(const std::vector<const T*>& cores, const std::vector<size_t>& ranks,
                  const std::vector<size_t>& modes, double tol, size_t max_rank);

template <typename TA, typename TB>
Scaled dense_dot(const TA* a, const TB* b, size_t n);

// m * 2^e in the form described at Scaled.
Scaled fold(double m, long e);

// The value of s as one double (infinite or zero where it lies outside float64's range).
double unfold(Scaled s);

}  // namespace svc
