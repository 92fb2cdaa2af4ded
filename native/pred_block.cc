// The "pred" codec's lossy block coding: each block is predicted by one of the candidate codings
// (chosen on sub-boxes of it), its residuals quantised linearly to the bound, and the codes
// entropy-coded; values no code reaches within the bound are kept exactly. See pred_internal.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "pred_internal.h"
#include "pred_walk.h"
#include "threads.h"

namespace svc {
namespace pred_detail {
namespace {

struct Coding {
  uint8_t kind, scheme;
};
constexpr Coding kCandidates[] = {{kInterpCubic, 1}, {kInterpCubic, 0}, {kInterpLinear, 1}, {kLorenzo, 0}};
constexpr int kCodings = int(sizeof(kCandidates) / sizeof(kCandidates[0]));

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

// Bits a quantised block would cost: the entropy of its code segments plus the exact values.
template <typename T>
double cost_bits(const Quantised<T>& q) {
  const uint16_t* c = q.codes.get();
  return entropy_bits(c, q.seg2) + entropy_bits(c + q.seg2, q.seg1 - q.seg2) + entropy_bits(c + q.seg1, q.n - q.seg1) +
         8.0 * sizeof(T) * double(q.unpred.size());
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
  std::unique_ptr<uint16_t[]> codes = scratch<uint16_t>(n);
  decode_codes(r, size_t(s2), codes.get());
  decode_codes(r, size_t(s12), codes.get() + s2);
  decode_codes(r, n - size_t(s2 + s12), codes.get() + s2 + s12);
  const uint8_t* up = r.take(size_t(nu) * sizeof(T));
  double ebl[kLevels], two[kLevels];
  level_bounds(eb, scheme, ebl);
  for (int l = 0; l < kLevels; ++l) two[l] = ebl[l] * 2;
  const uint16_t* cp = codes.get();
  size_t ui = 0;
  auto q = [&](size_t idx, double pred, int lev) {
    const uint16_t c = *cp++;
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

}  // namespace

// Quantises with bound eb (tighter on coarse levels per the candidate's scheme). A code is kept
// only where the value it reconstructs (computed as the decoder will) lies strictly within the
// level's bound; the codes come coarse to fine, and the finest two levels (most of the codes,
// with the narrowest distributions) get entropy tables of their own.
template <typename T>
void quantise_block(const T* x, const size_t e[kDims], double eb, int pick, double inv_scale, Quantised<T>& out) {
  size_t n = 1;
  for (int k = 0; k < kDims; ++k) n *= e[k];
  out.kind = kCandidates[pick].kind;
  out.scheme = kCandidates[pick].scheme;
  out.n = n;
  out.codes = scratch<uint16_t>(n);
  out.unpred.clear();
  std::unique_ptr<T[]> rec = scratch<T>(n);
  double ebl[kLevels], two[kLevels], inv[kLevels];
  level_bounds(eb, out.scheme, ebl);
  for (int l = 0; l < kLevels; ++l) {
    two[l] = ebl[l] * 2;
    inv[l] = 1 / two[l];
  }
  uint16_t* codes = out.codes.get();
  T* r = rec.get();
  // Where the finest two levels start: interpolation visits the elements whose coordinates are
  // all multiples of 4 (then of 2) first; Lorenzo's codes are all of level 1.
  size_t c4 = 1, c2 = 1;
  for (int k = 0; k < kDims; ++k) {
    c4 *= (e[k] + 3) / 4;
    c2 *= (e[k] + 1) / 2;
  }
  out.seg2 = out.kind == kLorenzo ? 0 : c4;
  out.seg1 = out.kind == kLorenzo ? 0 : c2;
  size_t ci = 0;
  double err = 0, maxe = 0;
  // returns the value stored at idx: the Lorenzo walk carries it to the next element
  auto q = [&](size_t idx, double pred, int lev) -> T {
    const T v = x[idx];
    const double t = (double(v) - pred) * inv[lev];
    if (std::fabs(t) < kRadius - 1) {
      // Round half away from zero by truncation (baseline x86-64 has no rounding instruction).
      const int32_t qi = int32_t(t + (t >= 0 ? 0.5 : -0.5));
      const double qd = double(qi);
      const T rv = T(pred + qd * two[lev]);
      const double d = std::fabs(double(rv) - double(v));
      if (d < ebl[lev]) {
        r[idx] = rv;
        codes[ci++] = uint16_t(qi + kRadius);
        const double ds = d * inv_scale;
        err += ds * ds;
        maxe = std::max(maxe, d);
        return rv;
      }
    }
    r[idx] = v;
    codes[ci++] = 0;
    out.unpred.push_back(v);
    return v;
  };
  walk(out.kind, e, static_cast<const T*>(r), q);
  out.st = Stats{err, maxe};
}

template <typename T>
int pick_coding(const T* x, const size_t e[kDims], double eb, double inv_scale) {
  size_t n = 1;
  for (int k = 0; k < kDims; ++k) n *= e[k];
  if (n <= 4096) return 0;
  const std::vector<Box> boxes = trial_boxes(e);
  std::vector<std::vector<T>> subs;
  for (const Box& tb : boxes) {
    subs.emplace_back(tb.count());
    copy_box<T, true>(const_cast<T*>(x), e, tb, subs.back().data());
  }
  // Every coding on every sub-box, in parallel where this block is not already one of several
  // coded in parallel (data of one block).
  const size_t nb = boxes.size();
  std::vector<double> bits(kCodings * nb);
  parallel_for(bits.size(), [&](size_t t) {
    Quantised<T> q;
    quantise_block(subs[t % nb].data(), boxes[t % nb].ext, eb, int(t / nb), inv_scale, q);
    bits[t] = cost_bits(q);
  });
  int pick = 0;
  double least = INFINITY;
  for (int ci = 0; ci < kCodings; ++ci) {
    double total = 0;
    for (size_t i = 0; i < nb; ++i) total += bits[ci * nb + i];
    if (total < least) {
      least = total;
      pick = ci;
    }
  }
  return pick;
}

template <typename T>
std::vector<uint8_t> emit_block(const Quantised<T>& q, const T* x, bool* raw) {
  std::vector<uint8_t> out;
  Writer w{out};
  w.u8(q.kind);
  w.u8(q.scheme);
  w.var(q.unpred.size());
  w.var(q.seg2);
  w.var(q.seg1 - q.seg2);
  // The three code sections are coded apart (in parallel for data of one block), then joined.
  const uint16_t* c = q.codes.get();
  const size_t at[4] = {0, q.seg2, q.seg1, q.n};
  std::vector<uint8_t> sec[3];
  parallel_for(3, [&](size_t k) {
    Writer ws{sec[k]};
    encode_codes(c + at[k], at[k + 1] - at[k], ws);
  });
  for (const std::vector<uint8_t>& v : sec) w.raw(v.data(), v.size());
  w.raw(q.unpred.data(), q.unpred.size() * sizeof(T));
  *raw = out.size() > 1 + q.n * sizeof(T);
  if (*raw) {
    out.clear();
    out.push_back(kRawExact);
    w.raw(x, q.n * sizeof(T));
  }
  return out;
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

#define SVC_PRED_BLOCK(T)                                                                             \
  template void quantise_block<T>(const T*, const size_t[kDims], double, int, double, Quantised<T>&); \
  template int pick_coding<T>(const T*, const size_t[kDims], double, double);                         \
  template std::vector<uint8_t> emit_block<T>(const Quantised<T>&, const T*, bool*);                  \
  template void decode_block<T>(const uint8_t*, size_t, const size_t[kDims], double, bool, T*);
SVC_PRED_BLOCK(float)
SVC_PRED_BLOCK(double)
#undef SVC_PRED_BLOCK

}  // namespace pred_detail
}  // namespace svc
