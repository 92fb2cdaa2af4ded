// The "pred" codec's entropy coder: static-model rANS (32-bit state, byte renormalisation) of
// order 0, and a context-modelled variant for quantisation codes. See pred_internal.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "pred_internal.h"

namespace svc {
namespace pred_detail {
namespace {

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

// The model of one table: used symbols ascending with frequencies summing to kScale.
struct Table {
  std::vector<uint32_t> sym, f, cum;
};

// Normalised frequencies for the symbols counted in count[0..span) (symbol = lo + index), every
// used symbol at least 1; rounding is settled on the most frequent symbols.
Table make_table(const uint32_t* count, uint32_t span, uint32_t lo, size_t total) {
  Table t;
  std::vector<uint32_t> idx;
  for (uint32_t s = 0; s < span; ++s)
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

// A table of nsym symbols (the count already read) below alpha.
Table read_table(Reader& r, uint64_t nsym, uint32_t alpha) {
  Table t;
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

// Decoding of one table: a slot's symbol is found from a 4,096-entry index of the first symbol
// of each run of 16 slots, then a short scan (only symbols rarer than 16 / 65,536 share a run).
constexpr uint32_t kIndexShift = 4;
struct DecTable {
  struct Entry {
    uint32_t cum, f, sym;
  };
  std::vector<Entry> e;  // plus a sentinel with cum = kScale
  std::vector<uint16_t> index;
  bool empty() const { return e.empty(); }
  explicit DecTable(const Table& t) {
    if (t.sym.empty()) return;
    e.resize(t.sym.size() + 1);
    for (size_t k = 0; k < t.sym.size(); ++k) e[k] = {t.cum[k], t.f[k], t.sym[k]};
    e.back() = {kScale, 0, 0};
    index.resize(kScale >> kIndexShift);
    size_t k = 0;
    for (uint32_t b = 0; b < index.size(); ++b) {
      const uint32_t slot = b << kIndexShift;
      while (e[k + 1].cum <= slot) ++k;
      index[b] = uint16_t(k);
    }
  }
  DecTable() = default;
  inline const Entry& find(uint32_t slot) const {
    const Entry* p = e.data() + index[slot >> kIndexShift];
    while (p[1].cum <= slot) ++p;
    return *p;
  }
  // Decodes one symbol from state x, which is advanced and refilled from [p, end).
  inline uint32_t next(uint32_t& x, const uint8_t*& p, const uint8_t* end) const {
    const uint32_t slot = x & (kScale - 1);
    const Entry& en = find(slot);
    x = en.f * (x >> kScaleBits) + slot - en.cum;
    while (x < kRansL) {
      if (p == end) corrupt("truncated entropy section");
      x = (x << 8) | *p++;
    }
    return en.sym;
  }
};

inline uint32_t read_state(Reader& r, const uint8_t*& p, const uint8_t*& end) {
  uint64_t nbytes = r.var();
  if (nbytes < 4 || nbytes > r.left()) corrupt("truncated entropy section");
  p = r.take(size_t(nbytes));
  end = p + nbytes;
  uint32_t x = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  p += 4;
  if (x < kRansL || x >= (kRansL << 8)) corrupt("bad entropy state");
  return x;
}

// Writes the final state and the bytes the encoder produced backwards into [p, end).
inline void finish(uint32_t x, uint8_t* p, uint8_t* end, Writer& w) {
  p -= 4;
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(x >> (8 * i));
  w.var(size_t(end - p));
  w.raw(p, size_t(end - p));
}

// ---- context model -------------------------------------------------------------------------
// The previous code's magnitude picks one of five tables (0, 1, 2-3, 4-8, larger or unpredictable):
// residuals cluster spatially, so a code after a large one is likelier to be large.

constexpr int kCtx = 5;
inline int code_ctx_of(uint32_t prev) {
  if (prev == 0) return kCtx - 1;
  const uint32_t m = prev > uint32_t(kRadius) ? prev - kRadius : kRadius - prev;
  return m == 0 ? 0 : m == 1 ? 1 : m <= 3 ? 2 : m <= 8 ? 3 : 4;
}

// The context of every 16-bit code, looked up rather than computed per symbol.
struct CtxLut {
  uint8_t c[65536];
  CtxLut() {
    for (uint32_t v = 0; v < 65536; ++v) c[v] = uint8_t(code_ctx_of(v));
  }
};
const CtxLut& ctx_lut() {
  static const CtxLut lut;
  return lut;
}

void rans_encode_ctx(const uint16_t* sym, size_t n, Writer& w) {
  const uint8_t* ctx = ctx_lut().c;
  uint32_t lo = sym[0], hi = sym[0];
  for (size_t i = 1; i < n; ++i) {
    lo = std::min<uint32_t>(lo, sym[i]);
    hi = std::max<uint32_t>(hi, sym[i]);
  }
  const uint32_t span = hi - lo + 1;
  std::vector<uint32_t> count(size_t(kCtx) * span, 0);
  size_t total[kCtx] = {};
  count[sym[0] - lo]++;
  total[0]++;
  for (size_t i = 1; i < n; ++i) {
    const int c = ctx[sym[i - 1]];
    count[size_t(c) * span + sym[i] - lo]++;
    total[c]++;
  }
  std::vector<EncSym> es(size_t(kCtx) * span);  // per context, indexed by symbol - lo
  for (int c = 0; c < kCtx; ++c) {
    Table t = make_table(count.data() + size_t(c) * span, span, lo, total[c]);
    write_table(t, w);
    for (size_t k = 0; k < t.sym.size(); ++k) es[size_t(c) * span + t.sym[k] - lo] = EncSym(t.cum[k], t.f[k]);
  }
  const size_t cap = 2 * n + 16;
  std::unique_ptr<uint8_t[]> out = scratch<uint8_t>(cap);
  uint8_t* end = out.get() + cap;
  uint8_t* p = end;
  uint32_t x = kRansL;
  const EncSym* e = es.data() - lo;
  for (size_t i = n; i-- > 1;) e[size_t(ctx[sym[i - 1]]) * span + sym[i]].put(x, p);
  e[sym[0]].put(x, p);
  finish(x, p, end, w);
}

// The tables of the context model, one per context, as rans_encode_ctx wrote them.
void read_ctx_tables(Reader& r, DecTable (&t)[kCtx]) {
  for (int c = 0; c < kCtx; ++c) {
    const uint64_t nsym = r.var();
    t[c] = DecTable(read_table(r, nsym, 65536));
  }
}

void rans_decode_ctx(Reader& r, size_t n, uint16_t* out) {
  const uint8_t* ctx = ctx_lut().c;
  DecTable t[kCtx];
  read_ctx_tables(r, t);
  const uint8_t *p, *end;
  uint32_t x = read_state(r, p, end);
  int c = 0;
  for (size_t i = 0; i < n; ++i) {
    if (t[c].empty()) corrupt("a code in a context with no table");
    const uint32_t sym = t[c].next(x, p, end);
    out[i] = uint16_t(sym);
    c = ctx[sym];
  }
  if (x != kRansL || p != end) corrupt("entropy section does not end where it should");
}

// ---- wide codes ----------------------------------------------------------------------------
// Where the codes spread over thousands of values (noise-like data at tight bounds), tables of
// every value cost more than they save. A code then becomes a token, coded with the context model
// above, and raw bits: the code's distance from the middle, zigzagged to u (0, -1, 1, -2, ... ->
// 0, 1, 2, 3, ...); u below 16 is its own token, a larger u is its leading bit's position with
// the next three bits in the token and the bits below them raw. Tokens keep the codes' layout
// (0 = unpredictable, kRadius + t otherwise), so the context of a token is that of a code of
// about its magnitude.

constexpr uint32_t kDirect = 16;  // u below this is a token by itself
constexpr uint32_t kMant = 3;     // bits after the leading one that go into the token
constexpr uint32_t kTokens = kDirect + (16 - 4) * (1u << kMant);

inline uint16_t token_of(uint16_t c, uint32_t& nb, uint32_t& raw) {
  nb = 0;
  raw = 0;
  if (c == 0) return 0;
  const int32_t d = int32_t(c) - kRadius;
  const uint32_t u = d >= 0 ? uint32_t(d) << 1 : (uint32_t(-d) << 1) - 1;
  if (u < kDirect) return uint16_t(kRadius + u);
  const uint32_t e = 31 - uint32_t(__builtin_clz(u));  // 4..15
  nb = e - kMant;
  raw = u & ((1u << nb) - 1);
  return uint16_t(kRadius + kDirect + (e - 4) * (1u << kMant) + ((u >> nb) & ((1u << kMant) - 1)));
}

// Each code's token and count of raw bits, looked up rather than computed per code.
struct TokenLut {
  uint16_t tok[65536];
  uint8_t nb[65536];
  TokenLut() {
    for (uint32_t c = 0; c < 65536; ++c) {
      uint32_t b, raw;
      tok[c] = token_of(uint16_t(c), b, raw);
      nb[c] = uint8_t(b);
    }
  }
};
const TokenLut& token_lut() {
  static const TokenLut lut;
  return lut;
}

// What a token gives back: code 0 (unpredictable), or the zigzagged distance u's high part and
// the count of raw bits below it.
struct TokenBase {
  uint32_t base;
  uint32_t nb;
};
struct TokenBases {
  TokenBase t[kTokens];
  TokenBases() {
    for (uint32_t v = 0; v < kTokens; ++v) {
      if (v < kDirect) {
        t[v] = {v, 0};
      } else {
        const uint32_t k = v - kDirect, e = 4 + (k >> kMant), nb = e - kMant;
        t[v] = {(1u << e) | ((k & ((1u << kMant) - 1)) << nb), nb};
      }
    }
  }
};
const TokenBases& token_bases() {
  static const TokenBases tb;
  return tb;
}

struct BitWriter {
  std::vector<uint8_t> b;
  uint64_t acc = 0;
  uint32_t n = 0;
  void put(uint32_t v, uint32_t bits) {
    acc |= uint64_t(v) << n;
    n += bits;
    while (n >= 8) {
      b.push_back(uint8_t(acc));
      acc >>= 8;
      n -= 8;
    }
  }
  void flush() {
    if (n > 0) b.push_back(uint8_t(acc));
    acc = 0;
    n = 0;
  }
};

struct BitReader {
  const uint8_t* p;
  const uint8_t* end;
  uint64_t acc = 0;
  uint32_t n = 0;
  uint32_t get(uint32_t bits) {
    if (n < bits) {
      if (end - p >= 8) {
        // a whole word at once: the bytes that fit above the bits held
        uint64_t w;
        std::memcpy(&w, p, 8);
        acc |= w << n;
        p += (63 - n) >> 3;
        n |= 56;
      } else {
        while (n < bits) {
          if (p == end) corrupt("truncated raw bits");
          acc |= uint64_t(*p++) << n;
          n += 8;
        }
      }
    }
    const uint32_t v = uint32_t(acc & ((uint64_t(1) << bits) - 1));
    acc >>= bits;
    n -= bits;
    return v;
  }
};

void encode_wide(const uint16_t* sym, size_t n, Writer& w) {
  std::unique_ptr<uint16_t[]> tok = scratch<uint16_t>(n);
  BitWriter bits;
  bits.b.reserve(n);
  const TokenLut& lut = token_lut();
  for (size_t i = 0; i < n; ++i) {
    const uint16_t c = sym[i];
    tok[i] = lut.tok[c];
    const uint32_t nb = lut.nb[c];
    if (nb) {
      const int32_t d = int32_t(c) - kRadius;
      const uint32_t u = d >= 0 ? uint32_t(d) << 1 : (uint32_t(-d) << 1) - 1;
      bits.put(u & ((1u << nb) - 1), nb);
    }
  }
  bits.flush();
  rans_encode_ctx(tok.get(), n, w);
  w.var(bits.b.size());
  w.raw(bits.b.data(), bits.b.size());
}

// The token decoder of rans_decode_ctx with each token turned back into its code as it comes
// (raw bits read from their own stream, refilled a byte at a time).
void decode_wide(Reader& r, size_t n, uint16_t* out) {
  const uint8_t* ctx = ctx_lut().c;
  DecTable t[kCtx];
  read_ctx_tables(r, t);
  const uint8_t *p, *end;
  uint32_t x = read_state(r, p, end);
  // the raw bits follow the rANS bytes
  const uint64_t nbytes = r.var();
  if (nbytes > r.left()) corrupt("truncated raw bits");
  const uint8_t* bp = r.take(size_t(nbytes));
  BitReader bits{bp, bp + nbytes};
  const TokenBase* bases = token_bases().t;
  int c = 0;
  for (size_t i = 0; i < n; ++i) {
    if (t[c].empty()) corrupt("a code in a context with no table");
    const uint32_t tk = t[c].next(x, p, end);
    c = ctx[tk];
    if (tk == 0) {
      out[i] = 0;
      continue;
    }
    if (tk < uint32_t(kRadius) || tk - kRadius >= kTokens) corrupt("bad token");
    const TokenBase& tb = bases[tk - kRadius];
    const uint32_t u = tb.base | bits.get(tb.nb);
    const int32_t d = int32_t(u >> 1) ^ -int32_t(u & 1);
    if (d <= -kRadius) corrupt("bad token");
    out[i] = uint16_t(kRadius + d);
  }
  if (x != kRansL || p != end) corrupt("entropy section does not end where it should");
  if (bits.p != bits.end) corrupt("raw bits do not end where they should");
}

// Distinct codes in sym, counted up to `cap`.
size_t distinct_codes(const uint16_t* sym, size_t n, size_t cap) {
  std::vector<uint8_t> seen(65536, 0);
  size_t k = 0;
  for (size_t i = 0; i < n && k < cap; ++i)
    if (!seen[sym[i]]) {
      seen[sym[i]] = 1;
      ++k;
    }
  return k;
}

inline double varint_bytes(uint64_t v) { return v < 128 ? 1 : v < 16384 ? 2 : 3; }

// Bytes the context model spends on a sequence with these per-context counts (span symbols per
// context): the entropy of each context's symbols plus its table (a byte of symbol gap and the
// frequency's varint per used symbol).
double ctx_cost(const std::vector<uint32_t>& count, size_t span, const size_t total[kCtx]) {
  double bits = 0, table = 0;
  for (int c = 0; c < kCtx; ++c) {
    if (total[c] == 0) continue;
    const double tc = double(total[c]);
    bits += tc * std::log2(tc);
    for (size_t k = 0; k < span; ++k) {
      const uint32_t v = count[size_t(c) * span + k];
      if (!v) continue;
      bits -= double(v) * std::log2(double(v));
      table += 1 + varint_bytes(std::max<uint64_t>(1, uint64_t(double(v) * kScale / tc)) - 1);
    }
  }
  return bits / 8 + table;
}

// Whether tokens and raw bits (mode 2) come out smaller than the context model over the codes
// (mode 1), estimated from one count of the codes per context (the tokens' counts follow from
// the codes'; both are taken under the codes' contexts, close to the tokens' own).
bool wide_is_smaller(const uint16_t* sym, size_t n) {
  const uint8_t* ctx = ctx_lut().c;
  uint32_t lo = sym[0], hi = sym[0];
  for (size_t i = 1; i < n; ++i) {
    lo = std::min<uint32_t>(lo, sym[i]);
    hi = std::max<uint32_t>(hi, sym[i]);
  }
  const size_t span = hi - lo + 1;
  std::vector<uint32_t> c1(size_t(kCtx) * span, 0), c2(size_t(kCtx) * (kTokens + 1), 0);
  size_t t1[kCtx] = {};
  c1[sym[0] - lo]++;
  t1[0]++;
  for (size_t i = 1; i < n; ++i) {
    const int a = ctx[sym[i - 1]];
    c1[size_t(a) * span + sym[i] - lo]++;
    t1[a]++;
  }
  double raw_bits = 0;
  for (int c = 0; c < kCtx; ++c)
    for (size_t k = 0; k < span; ++k) {
      const uint32_t v = c1[size_t(c) * span + k];
      if (!v) continue;
      uint32_t nb, raw;
      const uint16_t tk = token_of(uint16_t(lo + k), nb, raw);
      c2[size_t(c) * (kTokens + 1) + (tk == 0 ? 0 : tk - kRadius + 1)] += v;
      raw_bits += double(v) * nb;
    }
  return ctx_cost(c2, kTokens + 1, t1) + raw_bits / 8 + 4 < ctx_cost(c1, span, t1);
}

}  // namespace

template <typename S>
void rans_encode(const S* sym, size_t n, Writer& w) {
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
  if (lo == hi) {
    w.var(1);
    w.var(lo);
    return;
  }
  Table t = make_table(count.data(), span, lo, n);
  write_table(t, w);
  std::vector<EncSym> es(span);
  for (size_t k = 0; k < t.sym.size(); ++k) es[t.sym[k] - lo] = EncSym(t.cum[k], t.f[k]);
  const size_t cap = 2 * n + 16;
  std::unique_ptr<uint8_t[]> out = scratch<uint8_t>(cap);
  uint8_t* end = out.get() + cap;
  uint8_t* p = end;
  uint32_t x = kRansL;
  const EncSym* e = es.data() - lo;
  for (size_t i = n; i-- > 0;) e[sym[i]].put(x, p);
  finish(x, p, end, w);
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
  DecTable t(read_table(r, nsym, alpha));
  const uint8_t *p, *end;
  uint32_t x = read_state(r, p, end);
  for (size_t i = 0; i < n; ++i) out[i] = S(t.next(x, p, end));
  if (x != kRansL || p != end) corrupt("entropy section does not end where it should");
}

template void rans_encode<uint8_t>(const uint8_t*, size_t, Writer&);
template void rans_encode<uint16_t>(const uint16_t*, size_t, Writer&);
template void rans_decode<uint8_t>(Reader&, size_t, uint32_t, uint8_t*);
template void rans_decode<uint16_t>(Reader&, size_t, uint32_t, uint16_t*);

// Codes of a section: order 0 below 2,048 codes; from there the context model over the codes
// (mode 1), or over tokens and raw bits (mode 2) where the codes spread wide: from 256 distinct
// codes the one whose estimated size (entropy and tables, from counts) is smaller.
void encode_codes(const uint16_t* sym, size_t n, Writer& w) {
  if (n < 2048) {
    w.u8(0);
    rans_encode(sym, n, w);
  } else if (distinct_codes(sym, n, 256) >= 256 && wide_is_smaller(sym, n)) {
    w.u8(2);
    encode_wide(sym, n, w);
  } else {
    w.u8(1);
    rans_encode_ctx(sym, n, w);
  }
}

void decode_codes(Reader& r, size_t n, uint16_t* out) {
  uint8_t mode = r.u8();
  if (mode == 0) rans_decode(r, n, 65536, out);
  else if (mode == 1 && n > 0) rans_decode_ctx(r, n, out);
  else if (mode == 2 && n > 0) decode_wide(r, n, out);
  else corrupt("unknown entropy coding");
}

double entropy_bits(const uint16_t* sym, size_t n) {
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

}  // namespace pred_detail
}  // namespace svc
