// Lossless coding of integer arrays by prediction (pred_int.h).
//
// Stream: "SVCI", version 1, the dtype code, the rank, the shape (varints), the elements per
// slab (varint, at most 2^20), a table of the slabs' byte lengths (u32 each), then the slabs. A
// slab is a run of whole planes, whole rows or elements, coded on its own (the slabs are coded
// and decoded in parallel): the predictor's kind (u8), the residual codes (encode_codes: 32768 +
// the residual, 0 for a value kept as it is), the count of values kept (varint) and those values
// (little-endian, the dtype's width each).
//
// Predictions read only earlier elements of the same slab, so the decoder makes the same ones.
// Arithmetic is on 64-bit two's complement and wraps, so a residual is exact whatever the values.
#include "pred_int.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "pred_internal.h"
#include "threads.h"
#include "tt.h"

namespace svc {
namespace {

using pred_detail::Reader;
using pred_detail::scratch;
using pred_detail::write_parts;
using pred_detail::Writer;
using U64 = uint64_t;

constexpr uint8_t kIntMagic[4] = {'S', 'V', 'C', 'I'};
constexpr uint8_t kIntVersion = 1;
constexpr size_t kSlab = size_t(1) << 20;  // elements per slab, at most
constexpr int64_t kReach = 32767;          // residuals coded as codes: |r| <= kReach
constexpr size_t kSampleFrom = size_t(1) << 16;

enum Kind : uint8_t { kPrev = 0, kLorenzo = 1, kLorenzo2 = 2, kMed = 3, kLine = 4 };
constexpr uint8_t kKinds = 5;

[[noreturn]] void bad_stream(const std::string& why) {
  throw TTError("bad_request", "stream", "stream is not a valid integer lossless stream (" + why + ").");
}

// The per-element steps are inlined into the walks (GCC otherwise keeps predict out of line).
#if defined(__GNUC__)
#define SVC_INLINE inline __attribute__((always_inline))
#define SVC_INLINE_LAMBDA __attribute__((always_inline))
#else
#define SVC_INLINE inline
#define SVC_INLINE_LAMBDA
#endif

SVC_INLINE int64_t wrap(U64 u) {
  int64_t r;
  std::memcpy(&r, &u, 8);
  return r;
}

template <typename T>
inline int64_t widen(T v) {
  if constexpr (std::is_signed_v<T>) return int64_t(v);
  else return wrap(U64(v));
}

template <typename T>
inline T narrow(int64_t v) {
  return T(U64(v));  // modulo 2^width (the value itself for a stream that decodes right)
}

// The array's geometry over its inner shape (size-1 dimensions dropped): the row length, the
// plane size (rows times the row length), and whether rows and planes exist.
struct Geo {
  size_t n = 1, W = 1, H = 1, HW = 1;
  bool planes = false;
};

Geo geo_of(const std::vector<size_t>& shape) {
  Geo g;
  std::vector<size_t> in;
  for (size_t v : shape) {
    g.n *= v;
    if (v != 1) in.push_back(v);
  }
  if (!in.empty()) g.W = in.back();
  if (in.size() >= 2) g.H = in[in.size() - 2];
  g.HW = g.H * g.W;
  g.planes = in.size() >= 3;
  return g;
}

// Whole planes where one fits, else whole rows where one fits, else kSlab elements.
size_t slab_of(const Geo& g) {
  if (g.planes && g.HW <= kSlab) return g.HW * (kSlab / g.HW);
  if (g.W <= kSlab) return g.W * (kSlab / g.W);
  return kSlab;
}

// Calls f(k, l, l2, u, b) for each element e0 + k of [e0, e1): whether its left neighbour, the
// two to its left, the one above (same plane) and the one behind (previous plane) can be read,
// with every corner the predictors use, inside the slab. Row by row: past the first two
// elements of a row, and once the slab's first plane and row are behind, the flags are the same
// along the row, and that run is called with them fixed (so the predictor's tests fold away).
// With `every` > 1, only the rows whose index is a multiple of it are visited.
template <typename F>
SVC_INLINE void walk(const Geo& g, size_t e0, size_t e1, F&& f, size_t every = 1) {
  size_t w = e0 % g.W, h = (e0 % g.HW) / g.W;
  size_t i = e0, k = 0;
  while (i < e1) {
    const size_t end = std::min(e1, i + (g.W - w));
    if (every > 1 && (i / g.W) % every != 0) {
      k += end - i;
      i = end;
    } else {
      for (; i < end && (w < 2 || k < g.HW + g.W + 1); ++i, ++k, ++w) {
        const bool l = w > 0 && k >= 1;
        const bool l2 = w > 1 && k >= 2;
        const bool u = h > 0 && k >= g.W + (l ? 1 : 0);
        const bool b = g.planes && k >= g.HW + (u ? g.W : 0) + (l ? 1 : 0);
        f(k, l, l2, u, b);
      }
      const auto run = [&](auto u, auto b) {
        for (; i < end; ++i, ++k) f(k, true, true, decltype(u)::value, decltype(b)::value);
      };
      if (h > 0) {
        if (g.planes) run(std::true_type{}, std::true_type{});
        else run(std::true_type{}, std::false_type{});
      } else {
        if (g.planes) run(std::false_type{}, std::true_type{});
        else run(std::false_type{}, std::false_type{});
      }
    }
    w = 0;
    if (++h == g.H) h = 0;
  }
}

template <uint8_t K>
SVC_INLINE int64_t predict(const int64_t* x, size_t k, bool l, bool l2, bool u, bool b, size_t W, size_t HW) {
  if constexpr (K == kLine) {
    if (l2) return wrap(2 * U64(x[k - 1]) - U64(x[k - 2]));
    return l ? x[k - 1] : u ? x[k - W] : b ? x[k - HW] : 0;
  } else if constexpr (K == kPrev) {
    return l ? x[k - 1] : u ? x[k - W] : b ? x[k - HW] : 0;
  } else if constexpr (K == kMed) {
    if (l && u) {
      const int64_t a = x[k - 1], c = x[k - W], d = x[k - W - 1];
      const int64_t mx = std::max(a, c), mn = std::min(a, c);
      return d >= mx ? mn : d <= mn ? mx : wrap(U64(a) + U64(c) - U64(d));
    }
    return l ? x[k - 1] : u ? x[k - W] : b ? x[k - HW] : 0;
  } else {
    if (K == kLorenzo2) b = false;
    U64 p = 0;
    if (l) p += U64(x[k - 1]);
    if (u) p += U64(x[k - W]);
    if (b) p += U64(x[k - HW]);
    if (l && u) p -= U64(x[k - W - 1]);
    if (l && b) p -= U64(x[k - HW - 1]);
    if (u && b) p -= U64(x[k - HW - W]);
    if (l && u && b) p += U64(x[k - HW - W - 1]);
    return wrap(p);
  }
}

SVC_INLINE uint16_t code_of(int64_t x, int64_t p) {
  const int64_t r = wrap(U64(x) - U64(p));
  return r >= -kReach && r <= kReach ? uint16_t(r + 32768) : uint16_t(0);
}

// Codes of x[0, m) under predictor K; `sampled` codes only the rows whose index is a multiple of
// 4 (for choosing the predictor) and returns how many it wrote.
template <uint8_t K>
size_t codes_of(const Geo& g, size_t e0, const int64_t* x, size_t m, uint16_t* out, bool sampled) {
  size_t o = 0;
  walk(
      g, e0, e0 + m,
      [&](size_t k, bool l, bool l2, bool u, bool b) {
        out[o++] = code_of(x[k], predict<K>(x, k, l, l2, u, b, g.W, g.HW));
      },
      sampled ? 4 : 1);
  return o;
}

// f(std::integral_constant<uint8_t, K>) for the predictor `kind` (an unknown one is the median's).
template <typename F>
auto by_kind(uint8_t kind, F&& f) {
  switch (kind) {
    case kPrev:
      return f(std::integral_constant<uint8_t, kPrev>{});
    case kLorenzo:
      return f(std::integral_constant<uint8_t, kLorenzo>{});
    case kLorenzo2:
      return f(std::integral_constant<uint8_t, kLorenzo2>{});
    case kLine:
      return f(std::integral_constant<uint8_t, kLine>{});
    default:
      return f(std::integral_constant<uint8_t, kMed>{});
  }
}

size_t codes_any(uint8_t kind, const Geo& g, size_t e0, const int64_t* x, size_t m, uint16_t* out, bool sampled) {
  return by_kind(kind, [&](auto k) { return codes_of<decltype(k)::value>(g, e0, x, m, out, sampled); });
}

// The predictor whose codes (on a sample of rows in a large slab) cost the fewest bits, the
// values kept as they are counted at their width.
uint8_t pick_kind(const Geo& g, size_t e0, const int64_t* x, size_t m, size_t width, uint16_t* tmp) {
  const bool sampled = m >= kSampleFrom && g.W < m / 16;
  uint8_t best = kPrev;
  double best_bits = std::numeric_limits<double>::infinity();
  for (uint8_t kind = 0; kind < kKinds; ++kind) {
    // a vector: Lorenzo and the median predictor are the previous value; without planes the
    // two Lorenzo predictors are one
    if (g.H == 1 && !g.planes && (kind == kLorenzo || kind == kMed)) continue;
    if (kind == kLorenzo2 && !g.planes) continue;
    const size_t c = codes_any(kind, g, e0, x, m, tmp, sampled);
    double bits = pred_detail::entropy_bits(tmp, c);
    for (size_t i = 0; i < c; ++i) bits += tmp[i] == 0 ? 8.0 * double(width) : 0.0;
    if (bits < best_bits) {
      best_bits = bits;
      best = kind;
    }
  }
  return best;
}

template <typename T>
std::vector<uint8_t> encode_slab(const T* src, const Geo& g, size_t e0, size_t e1) {
  const size_t m = e1 - e0;
  std::unique_ptr<int64_t[]> x = scratch<int64_t>(m);
  for (size_t k = 0; k < m; ++k) x[k] = widen(src[e0 + k]);
  std::unique_ptr<uint16_t[]> codes = scratch<uint16_t>(m);
  const uint8_t kind = pick_kind(g, e0, x.get(), m, sizeof(T), codes.get());
  codes_any(kind, g, e0, x.get(), m, codes.get(), false);
  std::vector<T> kept;
  for (size_t k = 0; k < m; ++k)
    if (codes[k] == 0) kept.push_back(src[e0 + k]);
  std::vector<uint8_t> out;
  Writer w{out};
  w.u8(kind);
  pred_detail::encode_codes(codes.get(), m, w);
  w.var(kept.size());
  w.raw(kept.data(), kept.size() * sizeof(T));
  return out;
}

template <typename T, uint8_t K>
void rebuild(const Geo& g, size_t e0, size_t m, const uint16_t* codes, Reader& r, int64_t* x, T* out) {
  walk(g, e0, e0 + m, [&](size_t k, bool l, bool l2, bool u, bool b) SVC_INLINE_LAMBDA {
    if (codes[k] != 0) {
      x[k] = wrap(U64(predict<K>(x, k, l, l2, u, b, g.W, g.HW)) + U64(int64_t(codes[k]) - 32768));
    } else {
      T v;
      std::memcpy(&v, r.take(sizeof(T)), sizeof(T));
      x[k] = widen(v);
    }
    out[e0 + k] = narrow<T>(x[k]);
  });
}

template <typename T>
void decode_slab(const uint8_t* p, size_t len, const Geo& g, size_t e0, size_t e1, T* out) {
  const size_t m = e1 - e0;
  Reader r{p, p + len};
  const uint8_t kind = r.u8();
  if (kind >= kKinds) bad_stream("unknown predictor");
  std::unique_ptr<uint16_t[]> codes = scratch<uint16_t>(m);
  pred_detail::decode_codes(r, m, codes.get());
  size_t zeros = 0;
  for (size_t k = 0; k < m; ++k) zeros += codes[k] == 0;
  if (r.var() != zeros) bad_stream("count of values kept does not match the codes");
  if (r.left() != zeros * sizeof(T)) bad_stream("slab does not end where it should");
  std::unique_ptr<int64_t[]> x = scratch<int64_t>(m);
  by_kind(kind, [&](auto k) { rebuild<T, decltype(k)::value>(g, e0, m, codes.get(), r, x.get(), out); });
}

template <typename T>
std::vector<uint8_t> encode_t(const T* src, int dtype, const std::vector<size_t>& shape) {
  const Geo g = geo_of(shape);
  const size_t slab = slab_of(g);
  const size_t slabs = (g.n + slab - 1) / slab;
  std::vector<std::vector<uint8_t>> parts(slabs);
  parallel_for(slabs, [&](size_t s) { parts[s] = encode_slab(src, g, s * slab, std::min(g.n, (s + 1) * slab)); });
  std::vector<uint8_t> out;
  Writer w{out};
  w.raw(kIntMagic, 4);
  w.u8(kIntVersion);
  w.u8(uint8_t(dtype));
  w.u8(uint8_t(shape.size()));
  for (size_t v : shape) w.var(v);
  w.var(slab);
  write_parts(out, parts, "slab");
  return out;
}

template <typename T>
void decode_t(Reader& r, const std::vector<size_t>& shape, T* out) {
  const Geo g = geo_of(shape);
  const uint64_t slab = r.var();
  if (slab < 1 || slab > kSlab) bad_stream("bad slab size");
  const size_t slabs = size_t((g.n + slab - 1) / slab);
  if (slabs > r.left() / 4) bad_stream("slab table truncated");
  std::vector<size_t> off(slabs + 1, 0);
  for (size_t s = 0; s < slabs; ++s) {
    const uint32_t len = r.u32();
    if (len == 0) bad_stream("empty slab");
    off[s + 1] = off[s] + len;
  }
  if (off[slabs] != r.left()) bad_stream("slab sizes do not match the stream length");
  const uint8_t* base = r.p;
  parallel_for(slabs, [&](size_t s) {
    decode_slab(base + off[s], off[s + 1] - off[s], g, s * size_t(slab), std::min(g.n, (s + 1) * size_t(slab)), out);
  });
}

template <typename F>
auto by_dtype(int dtype, F&& f) {
  switch (dtype) {
    case 1:
      return f(int8_t{});
    case 2:
      return f(uint8_t{});
    case 3:
      return f(int16_t{});
    case 4:
      return f(uint16_t{});
    case 5:
      return f(int32_t{});
    case 6:
      return f(uint32_t{});
    case 7:
      return f(int64_t{});
    default:
      return f(uint64_t{});
  }
}

}  // namespace

size_t int_width(int dtype) {
  static const size_t w[] = {0, 1, 1, 2, 2, 4, 4, 8, 8};
  return dtype >= 1 && dtype <= 8 ? w[dtype] : 0;
}

std::vector<uint8_t> int_lossless_encode(const uint8_t* data, size_t bytes, int dtype,
                                         const std::vector<size_t>& shape) {
  const size_t width = int_width(dtype);
  if (width == 0) throw TTError("bad_request", "dtype", "dtype must be an integer type code from 1 to 8.");
  if (shape.empty() || shape.size() > 32) throw TTError("bad_request", "shape", "shape must have 1 to 32 dimensions.");
  double n = 1;
  for (size_t v : shape) n *= double(v);
  if (n * double(width) != double(bytes))
    throw TTError("bad_request", "shape", "shape must multiply to the number of elements of the data.");
  return by_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    std::unique_ptr<T[]> aligned;
    const T* src = reinterpret_cast<const T*>(data);
    if (reinterpret_cast<uintptr_t>(data) % alignof(T) != 0) {
      aligned = scratch<T>(bytes / sizeof(T));
      std::memcpy(aligned.get(), data, bytes);
      src = aligned.get();
    }
    return encode_t<T>(src, dtype, shape);
  });
}

Buffer int_lossless_decode(const uint8_t* s, size_t n, int dtype, const std::vector<size_t>& shape) {
  const size_t width = int_width(dtype);
  if (width == 0) throw TTError("bad_request", "dtype", "dtype must be an integer type code from 1 to 8.");
  Reader r{s, s + n};
  if (n < 8 || std::memcmp(s, kIntMagic, 4) != 0) bad_stream("bad magic");
  r.take(4);
  if (r.u8() != kIntVersion) bad_stream("unknown version");
  if (r.u8() != dtype) bad_stream("another dtype");
  if (r.u8() != shape.size()) bad_stream("another rank");
  size_t count = 1;
  for (size_t v : shape) {
    if (r.var() != v) bad_stream("another shape");
    count *= v;
  }
  Buffer out = alloc_buffer(count, width);
  try {
    by_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      decode_t<T>(r, shape, out.as<T>());
      return 0;
    });
  } catch (const TTError& e) {
    if (e.code != "bad_request") throw;
    // the entropy stage's own refusals name the float codec's stream: say which stream this is
    const std::string m = e.what();
    const size_t open = m.find('(');
    bad_stream(open == std::string::npos ? "corrupt" : m.substr(open + 1, m.size() - open - 3));
  }
  return out;
}

}  // namespace svc
