// The "pred" codec: see pred.h and docs/codecs.md.
//
// The encoder reconstructs every value exactly as the decoder will (same expressions, same
// rounding to the element type) and keeps a quantised value only when it lies strictly within
// the bound; contraction into FMA is switched off in this file so the two cannot differ.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "pred.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "threads.h"

namespace svc {
namespace {

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

void level_bounds(double eb, uint8_t scheme, double out[kLevels]) {
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

[[noreturn]] void corrupt(const std::string& why) {
  throw TTError("bad_request", "stream", "stream is not a valid pred stream (" + why + ").");
}

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

// ---- rANS (static model, 32-bit state, byte renormalisation) -------------------------------

// Encodes n symbols of an alphabet of `alpha` letters (<= 65536): frequency table, then bytes.
// An encoder symbol with the division by its frequency replaced by a multiplication by a
// rounded-up reciprocal (exact for 32-bit states; Giesen, "Interleaved entropy coders", 2014).
struct EncSym {
  uint32_t x_max, rcp_freq, bias, cmpl_freq, rcp_shift;
  EncSym() = default;
  EncSym(uint32_t start, uint32_t freq) {
    x_max = ((kRansL >> kScaleBits) << 8) * freq;
    cmpl_freq = kScale - freq;
    if (freq < 2) {
      rcp_freq = ~0u;
      rcp_shift = 0;
      bias = start + kScale - 1;
    } else {
      uint32_t shift = 0;
      while (freq > (1u << shift)) shift++;
      rcp_freq = uint32_t(((uint64_t(1) << (shift + 31)) + freq - 1) / freq);
      rcp_shift = shift - 1;
      bias = start;
    }
    rcp_shift += 32;
  }
  inline void put(uint32_t& x, uint8_t*& p) const {
    while (x >= x_max) {
      *--p = uint8_t(x);
      x >>= 8;
    }
    const uint32_t q = uint32_t((uint64_t(x) * rcp_freq) >> rcp_shift);
    x += bias + q * cmpl_freq;
  }
};

template <typename S>
void rans_encode(const S* sym, size_t n, uint32_t alpha, Writer& w) {
  (void)alpha;
  if (n == 0) {
    w.var(0);
    return;
  }
  // Tables over the range of symbols present only: quantisation codes cluster around the middle.
  uint32_t lo = sym[0], hi = sym[0];
  for (size_t i = 1; i < n; ++i) {
    lo = std::min<uint32_t>(lo, sym[i]);
    hi = std::max<uint32_t>(hi, sym[i]);
  }
  const uint32_t span = hi - lo + 1;
  std::vector<uint32_t> count(span, 0);
  for (size_t i = 0; i < n; ++i) count[sym[i] - lo]++;
  std::vector<uint32_t> used;
  for (uint32_t s = 0; s < span; ++s)
    if (count[s]) used.push_back(s);
  w.var(used.size());
  if (used.size() == 1) {
    w.var(used[0] + lo);
    return;
  }
  // Normalise to kScale, every used symbol at least 1.
  std::vector<uint32_t> f(span, 0);
  int64_t sum = 0;
  for (uint32_t s : used) {
    uint64_t v = uint64_t(count[s]) * kScale / n;
    f[s] = uint32_t(std::max<uint64_t>(1, v));
    sum += f[s];
  }
  std::vector<uint32_t> order = used;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return count[a] > count[b]; });
  int64_t diff = int64_t(kScale) - sum;
  if (diff > 0) f[order[0]] += uint32_t(diff);
  while (diff < 0) {
    for (uint32_t s : order) {
      if (diff == 0) break;
      if (f[s] > 1) {
        f[s]--;
        diff++;
      }
    }
  }
  uint32_t prev = 0;
  for (size_t k = 0; k < used.size(); ++k) {
    uint32_t s = used[k];
    w.var(k == 0 ? s + lo : s - prev - 1);
    w.var(f[s] - 1);
    prev = s;
  }
  std::vector<EncSym> es(span);
  uint32_t c = 0;
  for (uint32_t s : used) {
    es[s] = EncSym(c, f[s]);
    c += f[s];
  }
  std::vector<uint8_t> out(2 * n + 16);
  uint8_t* end = out.data() + out.size();
  uint8_t* p = end;
  uint32_t x = kRansL;
  for (size_t i = n; i-- > 0;) es[sym[i] - lo].put(x, p);
  p -= 4;
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(x >> (8 * i));
  w.var(size_t(end - p));
  w.raw(p, size_t(end - p));
}

// ---- context-modelled rANS for quantisation codes -------------------------------------------
// The previous code's magnitude picks one of five tables (0, 1, 2-3, 4-8, larger or unpredictable):
// residuals cluster spatially, so a code after a large one is likelier to be large.

constexpr int kCtx = 5;
inline int code_ctx(uint32_t prev) {
  if (prev == 0) return kCtx - 1;
  const uint32_t m = prev > uint32_t(kRadius) ? prev - kRadius : kRadius - prev;
  return m == 0 ? 0 : m == 1 ? 1 : m <= 3 ? 2 : m <= 8 ? 3 : 4;
}

struct Table {
  std::vector<uint32_t> sym, f, cum;  // used symbols ascending, frequencies summing to kScale
};

// Normalised frequencies for the symbols counted in count[0..span) (symbol = lo + index).
Table make_table(const std::vector<uint32_t>& count, uint32_t lo, size_t total) {
  Table t;
  std::vector<uint32_t> idx;
  for (uint32_t s = 0; s < count.size(); ++s)
    if (count[s]) idx.push_back(s);
  if (idx.empty()) return t;
  std::vector<uint32_t> f(idx.size());
  int64_t sum = 0;
  for (size_t k = 0; k < idx.size(); ++k) {
    f[k] = uint32_t(std::max<uint64_t>(1, uint64_t(count[idx[k]]) * kScale / total));
    sum += f[k];
  }
  std::vector<size_t> order(idx.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return count[idx[a]] > count[idx[b]]; });
  int64_t diff = int64_t(kScale) - sum;
  if (diff > 0) f[order[0]] += uint32_t(diff);
  while (diff < 0)
    for (size_t k : order) {
      if (diff == 0) break;
      if (f[k] > 1) {
        f[k]--;
        diff++;
      }
    }
  uint32_t c = 0;
  for (size_t k = 0; k < idx.size(); ++k) {
    t.sym.push_back(idx[k] + lo);
    t.f.push_back(f[k]);
    t.cum.push_back(c);
    c += f[k];
  }
  return t;
}

void write_table(const Table& t, Writer& w) {
  w.var(t.sym.size());
  for (size_t k = 0; k < t.sym.size(); ++k) {
    w.var(k == 0 ? t.sym[0] : t.sym[k] - t.sym[k - 1] - 1);
    w.var(t.f[k] - 1);
  }
}

Table read_table(Reader& r, uint32_t alpha) {
  Table t;
  uint64_t nsym = r.var();
  if (nsym > alpha || nsym > r.left()) corrupt("bad symbol count");
  uint64_t s = 0, total = 0;
  for (uint64_t k = 0; k < nsym; ++k) {
    uint64_t d = r.var();
    s = k == 0 ? d : s + d + 1;
    uint64_t fv = r.var() + 1;
    if (s >= alpha || fv > kScale) corrupt("bad frequency table");
    t.sym.push_back(uint32_t(s));
    t.f.push_back(uint32_t(fv));
    t.cum.push_back(uint32_t(total));
    total += fv;
    if (total > kScale) corrupt("bad frequency table");
  }
  if (nsym > 0 && total != kScale) corrupt("bad frequency table");
  return t;
}

void rans_encode_ctx(const uint16_t* sym, size_t n, Writer& w) {
  uint32_t lo = sym[0], hi = sym[0];
  for (size_t i = 1; i < n; ++i) {
    lo = std::min<uint32_t>(lo, sym[i]);
    hi = std::max<uint32_t>(hi, sym[i]);
  }
  const uint32_t span = hi - lo + 1;
  std::vector<uint32_t> count[kCtx];
  size_t total[kCtx] = {};
  for (int c = 0; c < kCtx; ++c) count[c].assign(span, 0);
  for (size_t i = 0; i < n; ++i) {
    int c = i == 0 ? 0 : code_ctx(sym[i - 1]);
    count[c][sym[i] - lo]++;
    total[c]++;
  }
  std::vector<EncSym> es[kCtx];  // per context, indexed by symbol - lo
  for (int c = 0; c < kCtx; ++c) {
    Table t = make_table(count[c], lo, total[c]);
    write_table(t, w);
    es[c].resize(t.sym.empty() ? 0 : span);
    for (size_t k = 0; k < t.sym.size(); ++k) es[c][t.sym[k] - lo] = EncSym(t.cum[k], t.f[k]);
  }
  std::vector<uint8_t> out(2 * n + 16);
  uint8_t* end = out.data() + out.size();
  uint8_t* p = end;
  uint32_t x = kRansL;
  for (size_t i = n; i-- > 0;) es[i == 0 ? 0 : code_ctx(sym[i - 1])][sym[i] - lo].put(x, p);
  p -= 4;
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(x >> (8 * i));
  w.var(size_t(end - p));
  w.raw(p, size_t(end - p));
}

void rans_decode_ctx(Reader& r, size_t n, uint16_t* out) {
  Table t[kCtx];
  std::vector<uint16_t> lut[kCtx];
  for (int c = 0; c < kCtx; ++c) {
    t[c] = read_table(r, 65536);
    if (t[c].sym.empty()) continue;
    lut[c].resize(kScale);
    for (size_t k = 0; k < t[c].sym.size(); ++k)
      std::fill(lut[c].begin() + t[c].cum[k], lut[c].begin() + t[c].cum[k] + t[c].f[k], uint16_t(k));
  }
  uint64_t nbytes = r.var();
  if (nbytes < 4 || nbytes > r.left()) corrupt("truncated entropy section");
  const uint8_t* p = r.take(size_t(nbytes));
  const uint8_t* end = p + nbytes;
  uint32_t x = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  p += 4;
  if (x < kRansL || x >= (kRansL << 8)) corrupt("bad entropy state");
  int c = 0;
  for (size_t i = 0; i < n; ++i) {
    if (t[c].sym.empty()) corrupt("a code in a context with no table");
    const uint32_t s = x & (kScale - 1);
    const uint32_t k = lut[c][s];
    const uint32_t v = t[c].sym[k];
    out[i] = uint16_t(v);
    x = t[c].f[k] * (x >> kScaleBits) + s - t[c].cum[k];
    while (x < kRansL) {
      if (p == end) corrupt("truncated entropy section");
      x = (x << 8) | *p++;
    }
    c = code_ctx(v);
  }
  if (x != kRansL || p != end) corrupt("entropy section does not end where it should");
}

// A section of quantisation codes: context-modelled from 2,048 codes on (where the five tables
// cost little beside the codes), order-0 below.
void encode_codes(const uint16_t* sym, size_t n, Writer& w) {
  if (n >= 2048) {
    w.u8(1);
    rans_encode_ctx(sym, n, w);
  } else {
    w.u8(0);
    rans_encode(sym, n, 65536, w);
  }
}

void decode_codes(Reader& r, size_t n, uint16_t* out);

// Order-0 entropy of n symbols in bits (what rans_encode spends, less its table).
template <typename S>
double entropy_bits(const S* sym, size_t n) {
  if (n < 2) return 0;
  uint32_t lo = sym[0], hi = sym[0];
  for (size_t i = 1; i < n; ++i) {
    lo = std::min<uint32_t>(lo, sym[i]);
    hi = std::max<uint32_t>(hi, sym[i]);
  }
  std::vector<uint32_t> count(hi - lo + 1, 0);
  for (size_t i = 0; i < n; ++i) count[sym[i] - lo]++;
  double bits = double(n) * std::log2(double(n));
  for (uint32_t c : count)
    if (c) bits -= double(c) * std::log2(double(c));
  return bits;
}

template <typename S>
void rans_decode(Reader& r, size_t n, uint32_t alpha, S* out) {
  uint64_t nsym = r.var();
  if (n == 0) {
    if (nsym != 0) corrupt("symbols for an empty block");
    return;
  }
  if (nsym == 0 || nsym > alpha) corrupt("bad symbol count");
  if (nsym == 1) {
    uint64_t s = r.var();
    if (s >= alpha) corrupt("bad symbol");
    std::fill(out, out + n, S(s));
    return;
  }
  std::vector<uint32_t> syms(nsym), f(nsym), cum(nsym);
  uint64_t s = 0, total = 0;
  for (uint64_t k = 0; k < nsym; ++k) {
    uint64_t d = r.var();
    s = k == 0 ? d : s + d + 1;
    uint64_t fv = r.var() + 1;
    if (s >= alpha || fv > kScale) corrupt("bad frequency table");
    syms[k] = uint32_t(s);
    f[k] = uint32_t(fv);
    cum[k] = uint32_t(total);
    total += fv;
    if (total > kScale) corrupt("bad frequency table");
  }
  if (total != kScale) corrupt("bad frequency table");
  std::vector<uint16_t> lut(kScale);
  for (uint64_t k = 0; k < nsym; ++k) std::fill(lut.begin() + cum[k], lut.begin() + cum[k] + f[k], uint16_t(k));
  uint64_t nbytes = r.var();
  if (nbytes < 4 || nbytes > r.left()) corrupt("truncated entropy section");
  const uint8_t* p = r.take(size_t(nbytes));
  const uint8_t* end = p + nbytes;
  uint32_t x = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  p += 4;
  if (x < kRansL || x >= (kRansL << 8)) corrupt("bad entropy state");
  for (size_t i = 0; i < n; ++i) {
    uint32_t slot = x & (kScale - 1);
    uint32_t k = lut[slot];
    out[i] = S(syms[k]);
    x = f[k] * (x >> kScaleBits) + slot - cum[k];
    while (x < kRansL) {
      if (p == end) corrupt("truncated entropy section");
      x = (x << 8) | *p++;
    }
  }
  if (x != kRansL || p != end) corrupt("entropy section does not end where it should");
}

void decode_codes(Reader& r, size_t n, uint16_t* out) {
  uint8_t mode = r.u8();
  if (mode == 0) rans_decode(r, n, 65536, out);
  else if (mode == 1 && n > 0) rans_decode_ctx(r, n, out);
  else corrupt("unknown entropy coding");
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
std::vector<size_t> inner_shape(const std::vector<size_t>& shape) {
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

void pad5(const std::vector<size_t>& v, size_t out[kDims]) {
  size_t off = kDims - v.size();
  for (int k = 0; k < kDims; ++k) out[k] = size_t(k) < off ? 1 : v[size_t(k) - off];
}

// Powers of two grown round-robin from the last dimension until the block holds kBlockTarget.
std::vector<size_t> choose_blocks(const std::vector<size_t>& in) {
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

void finish_geometry(Geometry& g, const std::vector<size_t>& in, const std::vector<size_t>& blk) {
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

Box block_box(const Geometry& g, size_t b) {
  Box x;
  for (int k = kDims; k-- > 0;) {
    size_t c = b % g.g5[k];
    b /= g.g5[k];
    x.lo[k] = c * g.b5[k];
    x.ext[k] = std::min(g.b5[k], g.n5[k] - x.lo[k]);
  }
  return x;
}

void strides(const size_t ext[kDims], size_t st[kDims]) {
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

// ---- prediction walks ----------------------------------------------------------------------
// Both walks visit every element of a block once, in an order where each prediction reads only
// elements visited before; q(idx, pred, level) quantises (encoder) or recovers (decoder)
// buf[idx]. Level 1 is the finest; the interpolation's anchor has level kLevels - 1.

template <typename T, typename Q>
void walk_interp(const size_t e[kDims], const T* buf, bool cubic, Q&& q) {
  size_t st[kDims];
  strides(e, st);
  q(size_t(0), 0.0, kLevels - 1);
  size_t maxe = 1;
  for (int k = 0; k < kDims; ++k) maxe = std::max(maxe, e[k]);
  int levels = 0;
  while ((size_t(1) << levels) < maxe) ++levels;
  for (int lev = levels; lev >= 1; --lev) {
    const size_t s = size_t(1) << (lev - 1);
    for (int k = 0; k < kDims; ++k) {
      if (e[k] <= s) continue;
      size_t beg[kDims], step[kDims];
      for (int j = 0; j < kDims; ++j) {
        beg[j] = j == k ? s : 0;
        step[j] = j < k ? s : 2 * s;
      }
      const size_t n = e[k], ks = st[k] * s;
      size_t i[kDims];
      for (i[0] = beg[0]; i[0] < e[0]; i[0] += step[0])
        for (i[1] = beg[1]; i[1] < e[1]; i[1] += step[1])
          for (i[2] = beg[2]; i[2] < e[2]; i[2] += step[2])
            for (i[3] = beg[3]; i[3] < e[3]; i[3] += step[3])
              for (i[4] = beg[4]; i[4] < e[4]; i[4] += step[4]) {
                size_t idx = i[0] * st[0] + i[1] * st[1] + i[2] * st[2] + i[3] * st[3] + i[4];
                const size_t ik = i[k];
                const T* p = buf + idx;
                double a = double(p[-ptrdiff_t(ks)]);
                double pred;
                bool right = ik + s < n, left3 = ik >= 3 * s, right3 = ik + 3 * s < n;
                if (right) {
                  double b = double(p[ks]);
                  if (!cubic) pred = (a + b) * 0.5;
                  else if (left3 && right3)
                    pred = (-double(p[-3 * ptrdiff_t(ks)]) + 9 * a + 9 * b - double(p[3 * ks])) * (1.0 / 16);
                  else if (right3) pred = (3 * a + 6 * b - double(p[3 * ks])) * 0.125;
                  else if (left3) pred = (-double(p[-3 * ptrdiff_t(ks)]) + 6 * a + 3 * b) * 0.125;
                  else pred = (a + b) * 0.5;
                } else if (left3) {
                  pred = 1.5 * a - 0.5 * double(p[-3 * ptrdiff_t(ks)]);
                } else {
                  pred = a;
                }
                q(idx, pred, std::min(lev, kLevels - 1));
              }
    }
  }
}

// Lorenzo over the last three dimensions (the first two of the padded five are independent).
template <typename T, typename Q>
void walk_lorenzo(const size_t e[kDims], const T* buf, Q&& q) {
  size_t st[kDims];
  strides(e, st);
  const size_t sa = st[2], sb = st[3];
  for (size_t i0 = 0; i0 < e[0]; ++i0)
    for (size_t i1 = 0; i1 < e[1]; ++i1)
      for (size_t a = 0; a < e[2]; ++a)
        for (size_t b = 0; b < e[3]; ++b) {
          size_t row = i0 * st[0] + i1 * st[1] + a * sa + b * sb;
          const T* p = buf + row;
          if (a > 0 && b > 0) {
            q(row, double(p[-ptrdiff_t(sa)]) + double(p[-ptrdiff_t(sb)]) - double(p[-ptrdiff_t(sa + sb)]), 1);
            for (size_t c = 1; c < e[4]; ++c) {
              const T* r = p + c;
              q(row + c,
                double(r[-1]) + double(r[-ptrdiff_t(sa)]) + double(r[-ptrdiff_t(sb)]) - double(r[-ptrdiff_t(sa) - 1]) -
                    double(r[-ptrdiff_t(sb) - 1]) - double(r[-ptrdiff_t(sa + sb)]) + double(r[-ptrdiff_t(sa + sb) - 1]),
                1);
            }
          } else if (a > 0 || b > 0) {
            const ptrdiff_t o = a > 0 ? ptrdiff_t(sa) : ptrdiff_t(sb);
            q(row, double(p[-o]), 1);
            for (size_t c = 1; c < e[4]; ++c) {
              const T* r = p + c;
              q(row + c, double(r[-1]) + double(r[-o]) - double(r[-o - 1]), 1);
            }
          } else {
            q(row, 0.0, 1);
            for (size_t c = 1; c < e[4]; ++c) q(row + c, double(p[c - 1]), 1);
          }
        }
}

template <typename T, typename Q>
void walk(uint8_t kind, const size_t e[kDims], const T* buf, Q&& q) {
  if (kind == kLorenzo) walk_lorenzo(e, buf, q);
  else walk_interp(e, buf, kind == kInterpCubic, q);
}

// ---- block coding --------------------------------------------------------------------------

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

// Lossy: quantises with bound eb (tighter on coarse levels per `scheme`) and appends the block
// payload; adds its errors to *st.
template <typename T>
void encode_lossy(const T* x, const size_t e[kDims], double eb, uint8_t kind, uint8_t scheme, std::vector<uint8_t>& out,
                  double inv_scale, Stats* st, double* cost_bits = nullptr) {
  size_t n = 1;
  for (int k = 0; k < kDims; ++k) n *= e[k];
  std::vector<T> rec(n);
  std::vector<uint16_t> codes(n);
  std::vector<T> unpred;
  double ebl[kLevels], two[kLevels], inv[kLevels];
  level_bounds(eb, scheme, ebl);
  for (int l = 0; l < kLevels; ++l) {
    two[l] = ebl[l] * 2;
    inv[l] = 1 / two[l];
  }
  size_t ci = 0;
  double err = 0, maxe = 0;
  // Codes come coarse to fine; the finest two levels (most of the codes, with the narrowest
  // distributions) get entropy tables of their own.
  size_t seg2 = SIZE_MAX, seg1 = SIZE_MAX;
  auto q = [&](size_t idx, double pred, int lev) {
    if (lev <= 2 && seg2 == SIZE_MAX) seg2 = ci;
    if (lev == 1 && seg1 == SIZE_MAX) seg1 = ci;
    const T v = x[idx];
    const double t = (double(v) - pred) * inv[lev];
    if (std::fabs(t) < kRadius - 1) {
      // Round half away from zero by truncation (baseline x86-64 has no rounding instruction).
      const double qd = double(int32_t(t + (t >= 0 ? 0.5 : -0.5)));
      const T r = T(pred + qd * two[lev]);
      const double d = std::fabs(double(r) - double(v));
      if (d < ebl[lev]) {
        rec[idx] = r;
        codes[ci++] = uint16_t(int(qd) + kRadius);
        const double ds = d * inv_scale;
        err += ds * ds;
        maxe = std::max(maxe, d);
        return;
      }
    }
    rec[idx] = v;
    codes[ci++] = 0;
    unpred.push_back(v);
  };
  walk(kind, e, rec.data(), q);
  if (st) st->add(Stats{err, maxe});
  if (seg1 == SIZE_MAX) seg1 = n;
  if (seg2 == SIZE_MAX) seg2 = seg1;
  if (cost_bits) {
    // Trial: the entropy of the codes plus the exact values, without writing a payload.
    *cost_bits = entropy_bits(codes.data(), seg2) + entropy_bits(codes.data() + seg2, seg1 - seg2) +
                 entropy_bits(codes.data() + seg1, n - seg1) + 8.0 * sizeof(T) * double(unpred.size());
    return;
  }
  Writer w{out};
  w.u8(kind);
  w.u8(scheme);
  w.var(unpred.size());
  w.var(seg2);
  w.var(seg1 - seg2);
  encode_codes(codes.data(), seg2, w);
  encode_codes(codes.data() + seg2, seg1 - seg2, w);
  encode_codes(codes.data() + seg1, n - seg1, w);
  w.raw(unpred.data(), unpred.size() * sizeof(T));
}

template <typename T>
void decode_lossy(Reader& r, uint8_t kind, const size_t e[kDims], double eb, T* rec) {
  size_t n = 1;
  for (int k = 0; k < kDims; ++k) n *= e[k];
  uint8_t scheme = r.u8();
  if (scheme >= kSchemes) corrupt("unknown level scheme");
  uint64_t nu = r.var();
  if (nu > n) corrupt("too many unpredictable values");
  const uint64_t s2 = r.var(), s12 = r.var();
  if (s2 > n || s12 > n - s2) corrupt("bad level segments");
  std::vector<uint16_t> codes(n);
  decode_codes(r, size_t(s2), codes.data());
  decode_codes(r, size_t(s12), codes.data() + s2);
  decode_codes(r, n - size_t(s2 + s12), codes.data() + s2 + s12);
  const uint8_t* up = r.take(size_t(nu) * sizeof(T));
  double ebl[kLevels], two[kLevels];
  level_bounds(eb, scheme, ebl);
  for (int l = 0; l < kLevels; ++l) two[l] = ebl[l] * 2;
  size_t ci = 0, ui = 0;
  auto q = [&](size_t idx, double pred, int lev) {
    const uint16_t c = codes[ci++];
    if (c == 0) {
      if (ui == nu) corrupt("too few unpredictable values");
      std::memcpy(&rec[idx], up + ui * sizeof(T), sizeof(T));
      ++ui;
      return;
    }
    const double qd = double(int(c) - kRadius);
    rec[idx] = T(pred + qd * two[lev]);
  };
  walk(kind, e, static_cast<const T*>(rec), q);
  if (ui != nu) corrupt("unused unpredictable values");
}

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

// Lossless: XOR of each value's bits with its prediction's bits, split into byte planes.
template <typename T>
void encode_lossless(const T* x, const size_t e[kDims], uint8_t kind, std::vector<uint8_t>& out) {
  using U = typename Bits<T>::U;
  size_t n = 1;
  for (int k = 0; k < kDims; ++k) n *= e[k];
  std::vector<U> res(n);
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
  std::vector<uint8_t> plane(n);
  for (size_t b = 0; b < sizeof(T); ++b) {
    for (size_t i = 0; i < n; ++i) plane[i] = uint8_t(res[i] >> (8 * b));
    rans_encode(plane.data(), n, 256, w);
  }
}

template <typename T>
void decode_lossless(Reader& r, uint8_t kind, const size_t e[kDims], T* rec) {
  using U = typename Bits<T>::U;
  size_t n = 1;
  for (int k = 0; k < kDims; ++k) n *= e[k];
  std::vector<U> res(n, 0);
  std::vector<uint8_t> plane(n);
  for (size_t b = 0; b < sizeof(T); ++b) {
    rans_decode(r, n, 256, plane.data());
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

struct Coding {
  uint8_t kind, scheme;
};
constexpr Coding kCandidates[] = {{kInterpCubic, 1}, {kInterpCubic, 0}, {kInterpLinear, 1}, {kLorenzo, 0}};

// Sub-boxes to try codings on: the centres of the four quadrants of the block's two largest
// dimensions, together about a sixteenth of the block (each at least 1024 elements).
std::vector<Box> trial_boxes(const size_t e[kDims]) {
  size_t n = 1;
  for (int k = 0; k < kDims; ++k) n *= e[k];
  int d0 = 0, d1 = -1;
  for (int k = 1; k < kDims; ++k)
    if (e[k] > e[d0]) d0 = k;
  for (int k = 0; k < kDims; ++k)
    if (k != d0 && e[k] > 1 && (d1 < 0 || e[k] > e[d1])) d1 = k;
  Box q;
  for (int k = 0; k < kDims; ++k) q.ext[k] = e[k];
  q.ext[d0] = (e[d0] + 1) / 2;
  if (d1 >= 0) q.ext[d1] = (e[d1] + 1) / 2;
  Box b = q;
  const size_t want = std::max<size_t>(1024, n / 64);
  while (b.count() > want) {
    int big = 0;
    for (int k = 1; k < kDims; ++k)
      if (b.ext[k] > b.ext[big]) big = k;
    b.ext[big] = (b.ext[big] + 1) / 2;
  }
  std::vector<Box> out;
  for (int i = 0; i < (d1 >= 0 ? 4 : 2); ++i) {
    Box t = b;
    for (int k = 0; k < kDims; ++k) {
      size_t base = 0;
      if (k == d0 && (i & 1)) base = e[k] - q.ext[k];
      if (k == d1 && (i & 2)) base = e[k] - q.ext[k];
      t.lo[k] = base + (q.ext[k] - b.ext[k]) / 2;
    }
    out.push_back(t);
  }
  return out;
}

// Encodes one block (contiguous, extents e): lossy codings are tried on a sub-box and the
// smallest is used for the block; lossless ones are tried whole. Raw storage when smaller.
// *pick: the candidate to use, or -1 to choose one (and store it there for later passes).
template <typename T>
std::vector<uint8_t> encode_block(const T* x, const size_t e[kDims], double eb, bool lossless, double inv_scale,
                                  Stats* st, int* pick_io = nullptr) {
  size_t n = 1;
  for (int k = 0; k < kDims; ++k) n *= e[k];
  std::vector<uint8_t> best, cur;
  if (lossless) {
    encode_lossless(x, e, kLosslessPrev, best);
    encode_lossless(x, e, kLosslessLorenzo, cur);
    if (cur.size() < best.size()) best.swap(cur);
  } else {
    int pick = 0;
    if (pick_io && *pick_io >= 0) {
      pick = *pick_io;
    } else if (n > 4096) {
      double least = INFINITY;
      std::vector<std::vector<T>> subs;
      const std::vector<Box> boxes = trial_boxes(e);
      for (const Box& tb : boxes) {
        subs.emplace_back(tb.count());
        copy_box<T, true>(const_cast<T*>(x), e, tb, subs.back().data());
      }
      for (int ci = 0; ci < int(sizeof(kCandidates) / sizeof(kCandidates[0])); ++ci) {
        const Coding& c = kCandidates[ci];
        double total = 0;
        for (size_t i = 0; i < boxes.size(); ++i) {
          double bits = 0;
          encode_lossy(subs[i].data(), boxes[i].ext, eb, c.kind, c.scheme, cur, inv_scale, nullptr, &bits);
          total += bits;
        }
        if (total < least) {
          least = total;
          pick = ci;
        }
      }
    }
    if (pick_io) *pick_io = pick;
    encode_lossy(x, e, eb, kCandidates[pick].kind, kCandidates[pick].scheme, best, inv_scale, st);
  }
  if (best.size() > 1 + n * sizeof(T)) {
    best.clear();
    best.push_back(kRawExact);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(x);
    best.insert(best.end(), p, p + n * sizeof(T));
  }
  return best;
}

template <typename T>
void decode_block(const uint8_t* p, size_t len, const size_t e[kDims], double eb, bool lossless, T* rec) {
  Reader r{p, p + len};
  size_t n = 1;
  for (int k = 0; k < kDims; ++k) n *= e[k];
  uint8_t kind = r.u8();
  if (kind == kRawExact) {
    std::memcpy(rec, r.take(n * sizeof(T)), n * sizeof(T));
  } else if (lossless && (kind == kLosslessPrev || kind == kLosslessLorenzo)) {
    decode_lossless(r, kind, e, rec);
  } else if (!lossless && (kind == kInterpLinear || kind == kInterpCubic || kind == kLorenzo)) {
    decode_lossy(r, kind, e, eb, rec);
  } else {
    corrupt("unknown block coding");
  }
  if (r.left() != 0) corrupt("block longer than its contents");
}

// ---- stream --------------------------------------------------------------------------------

struct Parsed {
  PredInfo info;
  Geometry g;
  double eb = 0;
  std::vector<size_t> off;  // payload offsets, blocks + 1 entries
  const uint8_t* base = nullptr;
};

Parsed parse(const uint8_t* s, size_t n) {
  Parsed P;
  Reader r{s, s + n};
  if (n < 9 || std::memcmp(s, kMagic, 4) != 0) corrupt("bad magic");
  r.take(4);
  if (r.u8() != kVersion) corrupt("unknown version");
  uint8_t dt = r.u8();
  if (dt != 1 && dt != 2) corrupt("unknown dtype");
  P.info.f64 = dt == 2;
  uint8_t flags = r.u8();
  if (flags > 1) corrupt("unknown flags");
  P.info.lossless = flags == 1;
  uint8_t nd = r.u8();
  if (nd < 1 || nd > 32) corrupt("bad rank");
  P.eb = r.f64();
  if (!std::isfinite(P.eb) || P.eb < 0 || (P.info.lossless ? P.eb != 0 : P.eb == 0)) corrupt("bad error bound");
  P.info.max_abs_error = P.eb;
  double total = 1;
  for (int k = 0; k < nd; ++k) {
    uint64_t v = r.u64();
    if (v < 1 || v > (uint64_t(1) << 31)) corrupt("bad shape");
    total *= double(v);
    if (total > 9007199254740991.0) corrupt("shape too large");
    P.info.shape.push_back(size_t(v));
  }
  std::vector<size_t> in = inner_shape(P.info.shape);
  std::vector<size_t> blk;
  size_t bprod = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    uint32_t v = r.u32();
    if (v < 1 || v > in[k]) corrupt("bad block shape");
    bprod *= v;
    if (bprod > kBlockMax) corrupt("block too large");
    blk.push_back(v);
  }
  finish_geometry(P.g, in, blk);
  P.g.shape = P.info.shape;
  P.info.inner_shape = in;
  P.info.block_shape = blk;
  P.info.blocks = P.g.blocks;
  if (P.g.blocks > r.left() / 4) corrupt("block table truncated");
  P.off.resize(P.g.blocks + 1);
  P.off[0] = 0;
  for (size_t b = 0; b < P.g.blocks; ++b) {
    uint32_t len = r.u32();
    if (len == 0) corrupt("empty block");
    P.off[b + 1] = P.off[b] + len;
  }
  if (P.off[P.g.blocks] != r.left()) corrupt("block sizes do not match the stream length");
  P.base = r.p;
  return P;
}

template <typename T>
double max_abs_of(const T* x, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(x[i])));
  return m;
}

// Encodes every block with bound eb (0: lossless) into a complete stream.
template <typename T>
std::vector<uint8_t> encode_all(const T* data, const Geometry& g, double eb, double inv_scale, std::vector<int>& picks,
                                Stats& stats) {
  const bool lossless = eb == 0;
  std::vector<std::vector<uint8_t>> parts(g.blocks);
  std::vector<Stats> st(g.blocks);
  picks.resize(g.blocks, -1);
  parallel_for(g.blocks, [&](size_t b) {
    Box bx = block_box(g, b);
    std::vector<T> buf(bx.count());
    copy_box<T, true>(const_cast<T*>(data), g.n5, bx, buf.data());
    parts[b] = encode_block(buf.data(), bx.ext, eb, lossless, inv_scale, &st[b], &picks[b]);
  });
  stats = Stats();
  for (const Stats& x : st) stats.add(x);
  std::vector<uint8_t> out;
  Writer w{out};
  w.raw(kMagic, 4);
  w.u8(kVersion);
  w.u8(sizeof(T) == 8 ? 2 : 1);
  w.u8(lossless ? 1 : 0);
  w.u8(uint8_t(g.shape.size()));
  w.f64(eb);
  for (size_t v : g.shape) w.u64(v);
  for (int k = kDims - g.inner_rank; k < kDims; ++k) w.u32(uint32_t(g.b5[k]));
  size_t total = out.size() + 4 * g.blocks;
  for (auto& p : parts) {
    if (p.size() > 0xffffffffu) throw TTError("internal", "", "block payload too large");
    w.u32(uint32_t(p.size()));
    total += p.size();
  }
  out.reserve(total);
  for (auto& p : parts) w.raw(p.data(), p.size());
  return out;
}

// Decodes the box `want` (internal padded coordinates) into out (C order over the box).
template <typename T>
void decode_box(const Parsed& P, const Box& want, T* out) {
  const Geometry& g = P.g;
  std::vector<size_t> hit;
  size_t lo[kDims], hi[kDims];
  for (int k = 0; k < kDims; ++k) {
    lo[k] = want.lo[k] / g.b5[k];
    hi[k] = (want.lo[k] + want.ext[k] - 1) / g.b5[k];
  }
  size_t c[kDims];
  for (c[0] = lo[0]; c[0] <= hi[0]; ++c[0])
    for (c[1] = lo[1]; c[1] <= hi[1]; ++c[1])
      for (c[2] = lo[2]; c[2] <= hi[2]; ++c[2])
        for (c[3] = lo[3]; c[3] <= hi[3]; ++c[3])
          for (c[4] = lo[4]; c[4] <= hi[4]; ++c[4]) {
            size_t b = 0;
            for (int k = 0; k < kDims; ++k) b = b * g.g5[k] + c[k];
            hit.push_back(b);
          }
  parallel_for(hit.size(), [&](size_t h) {
    size_t b = hit[h];
    Box bx = block_box(g, b);
    std::vector<T> buf(bx.count());
    decode_block(P.base + P.off[b], P.off[b + 1] - P.off[b], bx.ext, P.eb, P.info.lossless, buf.data());
    // Intersection of the block with the wanted box, copied row by row.
    Box is;
    size_t in_blk[kDims];
    for (int k = 0; k < kDims; ++k) {
      size_t a = std::max(bx.lo[k], want.lo[k]);
      size_t z = std::min(bx.lo[k] + bx.ext[k], want.lo[k] + want.ext[k]);
      is.lo[k] = a - want.lo[k];
      is.ext[k] = z - a;
      in_blk[k] = a - bx.lo[k];
    }
    size_t bst[kDims], ost[kDims];
    strides(bx.ext, bst);
    strides(want.ext, ost);
    for (size_t i0 = 0; i0 < is.ext[0]; ++i0)
      for (size_t i1 = 0; i1 < is.ext[1]; ++i1)
        for (size_t i2 = 0; i2 < is.ext[2]; ++i2)
          for (size_t i3 = 0; i3 < is.ext[3]; ++i3) {
            size_t src = (in_blk[0] + i0) * bst[0] + (in_blk[1] + i1) * bst[1] + (in_blk[2] + i2) * bst[2] +
                         (in_blk[3] + i3) * bst[3] + in_blk[4];
            size_t dst = (is.lo[0] + i0) * ost[0] + (is.lo[1] + i1) * ost[1] + (is.lo[2] + i2) * ost[2] +
                         (is.lo[3] + i3) * ost[3] + is.lo[4];
            std::memcpy(out + dst, buf.data() + src, is.ext[4] * sizeof(T));
          }
  });
}

template <typename T>
Buffer decompress_t(const Parsed& P, const std::vector<std::pair<size_t, size_t>>& ranges) {
  const auto& shape = P.info.shape;
  std::vector<std::pair<size_t, size_t>> rg = ranges;
  if (rg.empty())
    for (size_t v : shape) rg.push_back({0, v});
  if (rg.size() != shape.size())
    throw TTError("bad_request", "slice", "slice must have one [start, stop) per dimension.");
  size_t count = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (rg[k].first > rg[k].second || rg[k].second > shape[k])
      throw TTError(
          "bad_request", "slice",
          "slice[" + std::to_string(k) + "] must satisfy 0 <= start <= stop <= " + std::to_string(shape[k]) + ".");
    count *= rg[k].second - rg[k].first;
  }
  Buffer out = alloc_buffer(count, sizeof(T));
  if (count == 0) return out;
  // Ranges over the squeezed dimensions; the first `merged` of them form internal dimension 0.
  std::vector<std::pair<size_t, size_t>> sq;
  std::vector<size_t> sqdim;
  for (size_t k = 0; k < shape.size(); ++k)
    if (shape[k] != 1) {
      sq.push_back(rg[k]);
      sqdim.push_back(shape[k]);
    }
  const size_t ir = P.info.inner_shape.size();
  const size_t merged = sq.empty() ? 0 : sq.size() - ir + 1;
  Box want;
  for (int k = 0; k < kDims; ++k) {
    want.lo[k] = 0;
    want.ext[k] = 1;
  }
  const size_t off = kDims - ir;
  if (merged <= 1) {
    for (size_t k = 0; k < sq.size(); ++k) {
      want.lo[off + k] = sq[k].first;
      want.ext[off + k] = sq[k].second - sq[k].first;
    }
    decode_box(P, want, out.as<T>());
    return out;
  }
  // Leading dimensions were merged: decode the run of internal dimension 0 the slice spans, then
  // gather the rows (the remaining dimensions are contiguous in the decoded box).
  size_t first = 0, last = 0;
  for (size_t k = 0; k < merged; ++k) {
    first = first * sqdim[k] + sq[k].first;
    last = last * sqdim[k] + (sq[k].second - 1);
  }
  want.lo[off] = first;
  want.ext[off] = last - first + 1;
  size_t inner_row = 1;
  for (size_t k = merged; k < sq.size(); ++k) {
    want.lo[off + 1 + (k - merged)] = sq[k].first;
    want.ext[off + 1 + (k - merged)] = sq[k].second - sq[k].first;
    inner_row *= sq[k].second - sq[k].first;
  }
  std::vector<T> box(want.count());
  decode_box(P, want, box.data());
  std::vector<size_t> idx(merged);
  for (size_t k = 0; k < merged; ++k) idx[k] = sq[k].first;
  T* o = out.as<T>();
  for (;;) {
    size_t flat = 0;
    for (size_t k = 0; k < merged; ++k) flat = flat * sqdim[k] + idx[k];
    std::memcpy(o, box.data() + (flat - first) * inner_row, inner_row * sizeof(T));
    o += inner_row;
    size_t k = merged;
    while (k-- > 0) {
      if (++idx[k] < sq[k].second) break;
      idx[k] = sq[k].first;
    }
    if (k == size_t(-1)) break;
  }
  return out;
}

Geometry geometry_for(const std::vector<size_t>& shape) {
  Geometry g;
  g.shape = shape;
  std::vector<size_t> in = inner_shape(shape);
  finish_geometry(g, in, choose_blocks(in));
  return g;
}

// Errors of a decoded stream against the data: relative Frobenius and maximum absolute.
template <typename T>
void measure(const T* x, const T* y, size_t n, double scale, double xsq, PredStream& r) {
  double sq = 0, m = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = double(x[i]) - double(y[i]);
    m = std::max(m, std::fabs(d));
    double ds = d / scale;
    sq += ds * ds;
  }
  r.max_abs_error = m;
  r.relative_error = xsq > 0 ? std::sqrt(sq) / std::sqrt(xsq) : (m > 0 ? INFINITY : 0);
}

}  // namespace

PredInfo pred_info(const uint8_t* s, size_t n) { return parse(s, n).info; }

Buffer pred_decompress(const uint8_t* s, size_t n, const std::vector<std::pair<size_t, size_t>>& ranges) {
  Parsed P = parse(s, n);
  return P.info.f64 ? decompress_t<double>(P, ranges) : decompress_t<float>(P, ranges);
}

// The data's peak |x| and sum of (x / peak)^2 (scaled so float64 extremes do not overflow).
template <typename T>
void norms(const T* data, size_t n, double& scale, double& xsq) {
  scale = max_abs_of(data, n);
  xsq = 0;
  if (scale > 0)
    for (size_t i = 0; i < n; ++i) {
      double v = double(data[i]) / scale;
      xsq += v * v;
    }
}

// `count` sub-boxes (fewer for small data) of 2^12..2^15 elements, together about an eighth of
// the data, at spread, seeded positions.
std::vector<Box> sample_boxes(const Geometry& g, size_t count) {
  // count 0: the whole array as one box (data of one small block, where samples would read low).
  if (count == 0) return {block_box(g, 0)};
  const size_t cap = std::min<size_t>(size_t(1) << 15, std::max<size_t>(size_t(1) << 12, g.elems / 8 / count));
  size_t sb[kDims];
  for (int k = 0; k < kDims; ++k) sb[k] = g.b5[k];
  for (;;) {
    size_t c = 1;
    for (int k = 0; k < kDims; ++k) c *= sb[k];
    if (c <= cap) break;
    int big = 0;
    for (int k = 1; k < kDims; ++k)
      if (sb[k] > sb[big]) big = k;
    sb[big] = (sb[big] + 1) / 2;
  }
  size_t per = 1;
  for (int k = 0; k < kDims; ++k) per *= sb[k];
  const size_t m = std::max<size_t>(1, std::min<size_t>(count, g.elems / 8 / per));
  std::vector<Box> out(m);
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < m; ++i)
    for (int k = 0; k < kDims; ++k) {
      out[i].ext[k] = sb[k];
      size_t room = g.n5[k] - sb[k] + 1;
      h += 0x9E3779B97F4A7C15ull;
      uint64_t z = h;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      out[i].lo[k] = m == 1 ? 0 : size_t(z % room);
    }
  return out;
}

// Encodes the sample boxes with bound eb: total payload bytes and squared error (scaled).
template <typename T>
void try_samples(const T* data, const Geometry& g, const std::vector<Box>& boxes, double eb, double inv_scale,
                 size_t& bytes, double& sse, size_t& elems) {
  std::vector<size_t> sizes(boxes.size());
  std::vector<Stats> errs(boxes.size());
  parallel_for(boxes.size(), [&](size_t i) {
    std::vector<T> buf(boxes[i].count());
    copy_box<T, true>(const_cast<T*>(data), g.n5, boxes[i], buf.data());
    sizes[i] = encode_block(buf.data(), boxes[i].ext, eb, eb == 0, inv_scale, &errs[i]).size() + 4;
  });
  bytes = 0;
  sse = 0;
  elems = 0;
  for (size_t i = 0; i < boxes.size(); ++i) {
    bytes += sizes[i];
    sse += errs[i].sse;
    elems += boxes[i].count();
  }
}

// The pointwise bound to start from. Under a tolerance it is calibrated on samples so the
// predicted Frobenius error lands just below the tolerance (fewer full passes).
// `samples` and `iters` size the calibration; *ratio (when given) gets the samples' ratio at the
// last bound tried.
template <typename T>
double initial_bound(const T* data, const Geometry& g, double tolerance, double max_abs, double scale, double xsq,
                     size_t samples, int iters, double* ratio) {
  const double n = double(g.elems);
  double eb = INFINITY;
  if (max_abs >= 0) eb = max_abs;
  if (tolerance >= 0) {
    // Uniform quantisation errors in [-eb, eb] have RMS eb / sqrt(3).
    double t = tolerance * scale * std::sqrt(xsq) * std::sqrt(3.0 / n);
    if (t > 0 && t < eb && std::isfinite(t)) {
      const std::vector<Box> boxes = sample_boxes(g, samples);
      const double target = 0.95 * 0.95 * tolerance * tolerance * xsq;  // squared, scaled by 1/scale^2
      for (int it = 0; it < iters; ++it) {
        size_t bytes = 0, elems = 0;
        double sse = 0;
        try_samples(data, g, boxes, std::min(t, eb), 1 / scale, bytes, sse, elems);
        if (ratio) *ratio = double(elems * sizeof(T)) / double(bytes);
        if (t >= eb) break;  // max_abs_error binds
        const double predicted = sse * n / double(elems);
        if (!(predicted > 0)) {
          t *= 4;
          continue;
        }
        double f = std::sqrt(target / predicted);
        f = std::min(4.0, std::max(0.25, f));
        t *= f;
        if (f > 0.9 && f < 1.1) break;
      }
    }
    eb = std::min(eb, t);
  }
  if (!(eb > 0) || !std::isfinite(eb)) eb = 0;
  return eb;
}

template <typename T>
PredStream pred_compress(const T* data, const std::vector<size_t>& shape, double tolerance, double max_abs) {
  Geometry g = geometry_for(shape);
  const size_t n = g.elems;
  double scale, xsq;
  norms(data, n, scale, xsq);
  double eb = initial_bound(data, g, tolerance, max_abs, scale, xsq, 8, 3, nullptr);
  // Search the bound: the largest that held (lo, with the smallest stream so far) and the
  // smallest that missed (hi) bracket it; the Frobenius error is not monotone in the bound on
  // every input (integer-valued data), so a step that lands outside the bracket bisects it.
  // Passes are judged on the encoder's reconstruction; the stream returned is decoded and
  // measured again (and the search goes on should it miss).
  const double inv_scale = scale > 0 ? 1 / scale : 1;
  std::vector<int> picks;
  std::vector<uint8_t> best;
  double best_eb = 0;
  bool have = false;
  double lo = 0, hi = INFINITY;
  auto holds = [&](double rel, double maxe) {
    return (max_abs < 0 || maxe <= max_abs) && (tolerance < 0 || rel <= tolerance);
  };
  for (int attempt = 0;; ++attempt) {
    bool finish = attempt >= 6 && have;
    if (!finish) {
      if (attempt >= 12) eb = 0;  // the lossless stream always holds
      Stats st;
      std::vector<uint8_t> bytes = encode_all(data, g, eb, inv_scale, picks, st);
      const double rel = xsq > 0 ? std::sqrt(st.sse) / std::sqrt(xsq) : (st.maxe > 0 ? INFINITY : 0);
      const bool ok = eb == 0 || holds(rel, st.maxe);
      if (ok) {
        lo = std::max(lo, eb);
        if (!have || bytes.size() < best.size()) {
          best.swap(bytes);
          best_eb = eb;
          have = true;
        }
      } else {
        hi = std::min(hi, eb);
      }
      double next = eb;
      if (eb == 0) {
        finish = true;
      } else if (ok) {
        // Well below the tolerance (the calibration is approximate): try a looser bound.
        if (tolerance <= 0 || !(rel < 0.85 * tolerance) || (max_abs >= 0 && eb >= max_abs)) finish = true;
        else next = eb * (rel > 0 ? std::min(2.0, 0.97 * tolerance / rel) : 2.0);
      } else {
        double f = 0.5;
        if (tolerance >= 0 && rel > tolerance && std::isfinite(rel))
          f = std::min(0.97, std::max(0.25, 0.97 * tolerance / rel));
        next = eb * f;
      }
      if (!finish && have && hi / lo < 1.06) finish = true;
      if (!finish) {
        if (next <= lo || next >= hi) next = lo > 0 ? std::sqrt(lo * (std::isfinite(hi) ? hi : 2 * lo)) : next;
        eb = max_abs >= 0 ? std::min(max_abs, next) : next;
        continue;
      }
    }
    PredStream r;
    r.bytes = std::move(best);
    Parsed P = parse(r.bytes.data(), r.bytes.size());
    Buffer y = decompress_t<T>(P, {});
    measure(data, y.as<T>(), n, scale > 0 ? scale : 1, xsq, r);
    if (holds(r.relative_error, r.max_abs_error)) return r;
    if (best_eb == 0) throw TTError("internal", "", "pred: the lossless stream does not reproduce the data");
    // The decoded stream missed where the encoder's figures held (rounding of the sums): tighten.
    have = false;
    hi = std::min(hi, best_eb);
    lo = 0;
    eb = best_eb * 0.97;
    attempt = std::min(attempt, 6);
  }
}

template <typename T>
double pred_estimate(const T* data, const std::vector<size_t>& shape, double tolerance, double max_abs) {
  Geometry g = geometry_for(shape);
  double scale, xsq;
  norms(data, g.elems, scale, xsq);
  // Small data (one block of at most 2^17 elements) is cheap to code whole: no sampling there.
  const size_t count = g.blocks == 1 && g.elems <= (size_t(1) << 17) ? 0 : 4;
  double ratio = 0;
  double eb = initial_bound(data, g, tolerance, max_abs, scale, xsq, count, 2, &ratio);
  if (ratio > 0) return ratio;
  const std::vector<Box> boxes = sample_boxes(g, count);
  size_t bytes = 0, elems = 0;
  double sse = 0;
  try_samples(data, g, boxes, eb, scale > 0 ? 1 / scale : 1, bytes, sse, elems);
  return double(elems * sizeof(T)) / double(bytes);
}

template PredStream pred_compress<float>(const float*, const std::vector<size_t>&, double, double);
template PredStream pred_compress<double>(const double*, const std::vector<size_t>&, double, double);
template double pred_estimate<float>(const float*, const std::vector<size_t>&, double, double);
template double pred_estimate<double>(const double*, const std::vector<size_t>&, double, double);

}  // namespace svc
