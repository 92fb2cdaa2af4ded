// The "pred" codec's lossless mode (tolerance 0, max_abs_error 0, or data of zero norm): each
// value's bits XORed with its prediction's bits (the previous value, or Lorenzo), split into byte
// planes and entropy-coded. See pred_internal.h.
#include <cstring>

#include "pred_internal.h"
#include "pred_walk.h"

namespace svc {
namespace pred_detail {
namespace {

template <typename T>
struct Bits;
template <>
struct Bits<float> {
  using U = uint32_t;
};
template <>
struct Bits<double> {
  using U = uint64_t;
};

}  // namespace

template <typename T>
void encode_lossless(const T* x, const size_t e[kDims], uint8_t kind, std::vector<uint8_t>& out) {
  using U = typename Bits<T>::U;
  size_t n = 1;
  for (int k = 0; k < kDims; ++k) n *= e[k];
  std::unique_ptr<U[]> res = scratch<U>(n);
  if (kind == kLosslessPrev) {
    U prev = 0;
    for (size_t i = 0; i < n; ++i) {
      U u;
      std::memcpy(&u, &x[i], sizeof(T));
      res[i] = u ^ prev;
      prev = u;
    }
  } else {
    walk_lorenzo(e, x, [&](size_t idx, double pred, int) {
      const T p = T(pred);
      U a, b;
      std::memcpy(&a, &x[idx], sizeof(T));
      std::memcpy(&b, &p, sizeof(T));
      res[idx] = a ^ b;
    });
  }
  Writer w{out};
  w.u8(kind);
  std::unique_ptr<uint8_t[]> plane = scratch<uint8_t>(n);
  for (size_t b = 0; b < sizeof(T); ++b) {
    for (size_t i = 0; i < n; ++i) plane[i] = uint8_t(res[i] >> (8 * b));
    rans_encode(plane.get(), n, w);
  }
}

template <typename T>
void decode_lossless(Reader& r, uint8_t kind, const size_t e[kDims], T* rec) {
  using U = typename Bits<T>::U;
  size_t n = 1;
  for (int k = 0; k < kDims; ++k) n *= e[k];
  std::vector<U> res(n, 0);
  std::unique_ptr<uint8_t[]> plane = scratch<uint8_t>(n);
  for (size_t b = 0; b < sizeof(T); ++b) {
    rans_decode(r, n, 256, plane.get());
    for (size_t i = 0; i < n; ++i) res[i] |= U(plane[i]) << (8 * b);
  }
  if (kind == kLosslessPrev) {
    U prev = 0;
    for (size_t i = 0; i < n; ++i) {
      U u = res[i] ^ prev;
      std::memcpy(&rec[i], &u, sizeof(T));
      prev = u;
    }
  } else {
    walk_lorenzo(e, static_cast<const T*>(rec), [&](size_t idx, double pred, int) {
      const T p = T(pred);
      U b;
      std::memcpy(&b, &p, sizeof(T));
      U a = res[idx] ^ b;
      std::memcpy(&rec[idx], &a, sizeof(T));
    });
  }
}

template <typename T>
std::vector<uint8_t> encode_lossless_block(const T* x, const size_t e[kDims]) {
  size_t n = 1;
  for (int k = 0; k < kDims; ++k) n *= e[k];
  std::vector<uint8_t> best, cur;
  encode_lossless(x, e, kLosslessPrev, best);
  encode_lossless(x, e, kLosslessLorenzo, cur);
  if (cur.size() < best.size()) best.swap(cur);
  if (best.size() > 1 + n * sizeof(T)) {
    best.clear();
    best.push_back(kRawExact);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(x);
    best.insert(best.end(), p, p + n * sizeof(T));
  }
  return best;
}

#define SVC_PRED_LOSSLESS(T)                                                                       \
  template void encode_lossless<T>(const T*, const size_t[kDims], uint8_t, std::vector<uint8_t>&); \
  template void decode_lossless<T>(Reader&, uint8_t, const size_t[kDims], T*);                     \
  template std::vector<uint8_t> encode_lossless_block<T>(const T*, const size_t[kDims]);
SVC_PRED_LOSSLESS(float)
SVC_PRED_LOSSLESS(double)
#undef SVC_PRED_LOSSLESS

}  // namespace pred_detail
}  // namespace svc
