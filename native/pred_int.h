// Lossless coding of integer arrays by prediction: each value's difference from a prediction
// (the previous value, the line through the two before it, Lorenzo over up to three dimensions,
// or the median edge detector of LOCO-I), entropy-coded with the "pred" codec's rANS stage. The store codes integer entries so
// and with byte-shuffled deflate and keeps the smaller (docs/codecs.md, integer data).
// Hostile streams throw TTError("bad_request", "stream", ...); nothing is allocated before its
// size has been checked against the shape the caller expects and the stream's length.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "alloc.h"

namespace svc {

// Element types by code: 1 int8, 2 uint8, 3 int16, 4 uint16, 5 int32, 6 uint32, 7 int64,
// 8 uint64. Their width in bytes, 0 for an unknown code.
size_t int_width(int dtype);

// The stream of `bytes` bytes of little-endian integers of `dtype` in C order over `shape`.
std::vector<uint8_t> int_lossless_encode(const uint8_t* data, size_t bytes, int dtype,
                                         const std::vector<size_t>& shape);

// The values of a stream made for (dtype, shape), as bytes.
Buffer int_lossless_decode(const uint8_t* s, size_t n, int dtype, const std::vector<size_t>& shape);

}  // namespace svc
