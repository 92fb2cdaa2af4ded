// Internals of the "pred" codec shared by its sources (not part of the addon's surface):
// constants of the stream format, byte reading and writing, the block geometry, and the
// declarations of the entropy coder (pred_rans.cc), block coding (pred_block.cc, lossless mode in
// pred_lossless.cc) and stream layout (pred_stream.cc). docs/codecs.md describes the stream.
//
// Every source that quantises or reconstructs values is compiled without floating-point
// contraction (CMakeLists.txt, and the pragma below for builds that do not read it): the encoder
// must round exactly as the decoder does.
#pragma once
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pred.h"

namespace svc {
namespace pred_detail {

constexpr uint8_t kMagic[4] = {'S', 'V', 'C', 'P'};
constexpr uint8_t kVersion = 1;
constexpr int kDims = 5;                          // native rank; higher ranks merge leading dimensions
constexpr size_t kBlockTarget = size_t(1) << 18;  // elements per block the encoder aims at
constexpr size_t kBlockMax = size_t(1) << 20;     // largest block a stream may declare
constexpr int kRadius = 32768;                    // quantisation codes 1..65535, 0 = unpredictable
constexpr uint32_t kScaleBits = 16;               // rANS probability resolution
constexpr uint32_t kScale = 1u << kScaleBits;
constexpr uint32_t kRansL = 1u << 23;
constexpr int kLevels = 8;  // per-level bounds: levels 1..6 of the interpolation, 7 for the anchor

// Interpolation quantises coarse levels with a tighter bound (their values feed every finer
// prediction): level l uses eb / min(alpha^(l-1), beta), after Liang et al.'s SZ3 and Liu et al.'s
// QoZ. The scheme byte of a block picks (alpha, beta); 0 is one bound for every level.
constexpr double kAlpha[] = {1.0, 1.5, 2.0};
constexpr double kBeta[] = {1.0, 3.0, 4.0};
constexpr uint8_t kSchemes = 3;

inline void level_bounds(double eb, uint8_t scheme, double out[kLevels]) {
  double f = 1;
  for (int l = 0; l < kLevels; ++l) {
    out[l] = eb / std::min(f, kBeta[scheme]);
    if (l >= 1) f *= kAlpha[scheme];
  }
}

enum BlockKind : uint8_t {
  kInterpLinear = 0,
  kInterpCubic = 1,
  kLorenzo = 2,
  kRawExact = 3,
  kLosslessPrev = 16,
  kLosslessLorenzo = 17,
};

[[noreturn]] void corrupt(const std::string& why);

// ---- bytes ---------------------------------------------------------------------------------

struct Writer {
  std::vector<uint8_t>& b;
  void u8(uint8_t v) { b.push_back(v); }
  void raw(const void* p, size_t n) {
    const uint8_t* q = static_cast<const uint8_t*>(p);
    b.insert(b.end(), q, q + n);
  }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) b.push_back(uint8_t(v >> (8 * i)));
  }
  void f64(double v) {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    u64(u);
  }
  void var(uint64_t v) {
    while (v >= 0x80) {
      b.push_back(uint8_t(v) | 0x80);
      v >>= 7;
    }
    b.push_back(uint8_t(v));
  }
};

struct Reader {
  const uint8_t* p;
  const uint8_t* end;
  size_t left() const { return size_t(end - p); }
  void need(size_t n) const {
    if (left() < n) corrupt("truncated");
  }
  uint8_t u8() {
    need(1);
    return *p++;
  }
  uint32_t u32() {
    need(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
    p += 4;
    return v;
  }
  uint64_t u64() {
    need(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
    p += 8;
    return v;
  }
  double f64() {
    uint64_t u = u64();
    double v;
    std::memcpy(&v, &u, 8);
    return v;
  }
  uint64_t var() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t c = u8();
      v |= uint64_t(c & 0x7f) << shift;
      if (!(c & 0x80)) return v;
    }
    corrupt("bad varint");
  }
  const uint8_t* take(size_t n) {
    need(n);
    const uint8_t* q = p;
    p += n;
    return q;
  }
};

// Appends one uint32 length per part, then the parts: a stream's table and payloads.
inline void write_parts(std::vector<uint8_t>& out, const std::vector<std::vector<uint8_t>>& parts, const char* what) {
  Writer w{out};
  size_t total = out.size() + 4 * parts.size();
  for (const auto& p : parts) {
    if (p.size() > 0xffffffffu) throw TTError("internal", "", std::string(what) + " payload too large");
    w.u32(uint32_t(p.size()));
    total += p.size();
  }
  out.reserve(total);
  for (const auto& p : parts) w.raw(p.data(), p.size());
}

// ---- geometry ------------------------------------------------------------------------------

struct Geometry {
  std::vector<size_t> shape;  // as given
  size_t n5[kDims];           // internal shape padded to 5 dimensions with leading 1s
  size_t b5[kDims];           // block shape, padded alike
  size_t g5[kDims];           // blocks per dimension
  int inner_rank = 1;
  size_t blocks = 1;
  size_t elems = 1;
};

// Drops size-1 dimensions and merges leading ones beyond five; returns the internal shape.
inline std::vector<size_t> inner_shape(const std::vector<size_t>& shape) {
  std::vector<size_t> s;
  for (size_t v : shape)
    if (v != 1) s.push_back(v);
  if (s.empty()) s.push_back(1);
  while (s.size() > size_t(kDims)) {
    s[1] *= s[0];
    s.erase(s.begin());
  }
  return s;
}

inline void pad5(const std::vector<size_t>& v, size_t out[kDims]) {
  size_t off = kDims - v.size();
  for (int k = 0; k < kDims; ++k) out[k] = size_t(k) < off ? 1 : v[size_t(k) - off];
}

// Powers of two grown round-robin from the last dimension until the block holds kBlockTarget.
inline std::vector<size_t> choose_blocks(const std::vector<size_t>& in) {
  std::vector<size_t> b(in.size(), 1);
  size_t prod = 1;
  bool grew = true;
  while (grew) {
    grew = false;
    for (size_t k = in.size(); k-- > 0;) {
      if (b[k] >= in[k] || prod * 2 > kBlockTarget) continue;
      size_t nb = std::min(b[k] * 2, in[k]);
      prod = prod / b[k] * nb;
      b[k] = nb;
      grew = true;
    }
  }
  return b;
}

inline void finish_geometry(Geometry& g, const std::vector<size_t>& in, const std::vector<size_t>& blk) {
  g.inner_rank = int(in.size());
  pad5(in, g.n5);
  pad5(blk, g.b5);
  g.blocks = 1;
  g.elems = 1;
  for (int k = 0; k < kDims; ++k) {
    g.g5[k] = (g.n5[k] + g.b5[k] - 1) / g.b5[k];
    g.blocks *= g.g5[k];
    g.elems *= g.n5[k];
  }
}

struct Box {
  size_t lo[kDims];
  size_t ext[kDims];
  size_t count() const {
    size_t c = 1;
    for (int k = 0; k < kDims; ++k) c *= ext[k];
    return c;
  }
};

inline Box block_box(const Geometry& g, size_t b) {
  Box x;
  for (int k = kDims; k-- > 0;) {
    size_t c = b % g.g5[k];
    b /= g.g5[k];
    x.lo[k] = c * g.b5[k];
    x.ext[k] = std::min(g.b5[k], g.n5[k] - x.lo[k]);
  }
  return x;
}

inline void strides(const size_t ext[kDims], size_t st[kDims]) {
  st[kDims - 1] = 1;
  for (int k = kDims - 1; k-- > 0;) st[k] = st[k + 1] * ext[k + 1];
}

// Copies box `bx` of the array (shape n5) into dst (C order over the box), or back.
template <typename T, bool ToBox>
void copy_box(T* arr, const size_t n5[kDims], const Box& bx, T* box) {
  size_t ast[kDims], bst[kDims];
  strides(n5, ast);
  strides(bx.ext, bst);
  size_t row = bx.ext[4];
  for (size_t i0 = 0; i0 < bx.ext[0]; ++i0)
    for (size_t i1 = 0; i1 < bx.ext[1]; ++i1)
      for (size_t i2 = 0; i2 < bx.ext[2]; ++i2)
        for (size_t i3 = 0; i3 < bx.ext[3]; ++i3) {
          size_t a = (bx.lo[0] + i0) * ast[0] + (bx.lo[1] + i1) * ast[1] + (bx.lo[2] + i2) * ast[2] +
                     (bx.lo[3] + i3) * ast[3] + bx.lo[4];
          size_t o = i0 * bst[0] + i1 * bst[1] + i2 * bst[2] + i3 * bst[3];
          if (ToBox) std::memcpy(box + o, arr + a, row * sizeof(T));
          else std::memcpy(arr + a, box + o, row * sizeof(T));
        }
}

// What the encoder's own reconstruction shows: squared errors (times inv_scale^2) and the
// largest |error|. The decoder reproduces that reconstruction bit for bit.
struct Stats {
  double sse = 0;
  double maxe = 0;
  void add(const Stats& o) {
    sse += o.sse;
    maxe = std::max(maxe, o.maxe);
  }
};

// An uninitialised array of n elements (every element is written before it is read).
template <typename T>
std::unique_ptr<T[]> scratch(size_t n) {
  return std::unique_ptr<T[]>(new T[n == 0 ? 1 : n]);
}

// ---- entropy coding (pred_rans.cc) ---------------------------------------------------------

// Order-0 rANS of n symbols below `alpha` (<= 65536): frequency table, then bytes.
template <typename S>
void rans_encode(const S* sym, size_t n, Writer& w);
template <typename S>
void rans_decode(Reader& r, size_t n, uint32_t alpha, S* out);
// A section of quantisation codes (context-modelled from 2,048 codes on, order-0 below).
void encode_codes(const uint16_t* sym, size_t n, Writer& w);
void decode_codes(Reader& r, size_t n, uint16_t* out);
// Order-0 entropy of n codes in bits (what rans_encode spends, less its table).
double entropy_bits(const uint16_t* sym, size_t n);

// ---- block coding (pred_block.cc, pred_lossless.cc) ----------------------------------------

// A block quantised with one coding, before entropy coding: the codes (coarse to fine; the finest
// two levels start at seg2 and seg1), the values kept exactly, and the errors of the block's
// reconstruction.
template <typename T>
struct Quantised {
  uint8_t kind = 0, scheme = 0;
  size_t n = 0, seg2 = 0, seg1 = 0;
  std::unique_ptr<uint16_t[]> codes;
  std::vector<T> unpred;
  Stats st;
};

// The coding to use for a block (an index into the candidates), tried on sub-boxes of it.
template <typename T>
int pick_coding(const T* x, const size_t e[kDims], double eb, double inv_scale);
// Quantises block x (contiguous, extents e) with bound eb and candidate `pick`.
template <typename T>
void quantise_block(const T* x, const size_t e[kDims], double eb, int pick, double inv_scale, Quantised<T>& q);
// The block payload of q (raw storage of x when that is smaller; *raw tells which).
template <typename T>
std::vector<uint8_t> emit_block(const Quantised<T>& q, const T* x, bool* raw);
// The lossless block payload of x (the smaller of the two lossless codings, or raw).
template <typename T>
std::vector<uint8_t> encode_lossless_block(const T* x, const size_t e[kDims]);
template <typename T>
void encode_lossless(const T* x, const size_t e[kDims], uint8_t kind, std::vector<uint8_t>& out);
template <typename T>
void decode_lossless(Reader& r, uint8_t kind, const size_t e[kDims], T* rec);
// Decodes one block payload into rec (extents e).
template <typename T>
void decode_block(const uint8_t* p, size_t len, const size_t e[kDims], double eb, bool lossless, T* rec);

// ---- stream (pred_stream.cc) ---------------------------------------------------------------

struct Parsed {
  PredInfo info;
  Geometry g;
  double eb = 0;
  std::vector<size_t> off;  // payload offsets, blocks + 1 entries
  const uint8_t* base = nullptr;
};

Parsed parse(const uint8_t* s, size_t n);
Geometry geometry_for(const std::vector<size_t>& shape);
// A complete stream of the block payloads coded with bound eb (0: lossless).
template <typename T>
std::vector<uint8_t> write_stream(const Geometry& g, double eb, std::vector<std::vector<uint8_t>>& parts);

}  // namespace pred_detail
}  // namespace svc
