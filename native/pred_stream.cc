// The "pred" codec's stream: header, block table and payloads, parsed with every length checked
// against the header and the stream size before anything is allocated; decoding of the blocks a
// box touches (in parallel). See pred_internal.h and docs/codecs.md.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "pred_internal.h"
#include "threads.h"
#include "tt_util.h"

namespace svc {
namespace pred_detail {

void corrupt(const std::string& why) {
  throw TTError("bad_request", "stream", "stream is not a valid pred stream (" + why + ").");
}

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

Geometry geometry_for(const std::vector<size_t>& shape) {
  Geometry g;
  g.shape = shape;
  std::vector<size_t> in = inner_shape(shape);
  finish_geometry(g, in, choose_blocks(in));
  return g;
}

template <typename T>
std::vector<uint8_t> write_stream(const Geometry& g, double eb, std::vector<std::vector<uint8_t>>& parts) {
  const bool lossless = eb == 0;
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
  write_parts(out, parts, "block");
  return out;
}

template std::vector<uint8_t> write_stream<float>(const Geometry&, double, std::vector<std::vector<uint8_t>>&);
template std::vector<uint8_t> write_stream<double>(const Geometry&, double, std::vector<std::vector<uint8_t>>&);

namespace {

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
    std::unique_ptr<T[]> buf = scratch<T>(bx.count());
    decode_block(P.base + P.off[b], P.off[b + 1] - P.off[b], bx.ext, P.eb, P.info.lossless, buf.get());
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
            std::memcpy(out + dst, buf.get() + src, is.ext[4] * sizeof(T));
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
  std::unique_ptr<T[]> box = scratch<T>(want.count());
  decode_box(P, want, box.get());
  std::vector<size_t> idx(merged);
  for (size_t k = 0; k < merged; ++k) idx[k] = sq[k].first;
  T* o = out.as<T>();
  for (;;) {
    size_t flat = 0;
    for (size_t k = 0; k < merged; ++k) flat = flat * sqdim[k] + idx[k];
    std::memcpy(o, box.get() + (flat - first) * inner_row, inner_row * sizeof(T));
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

// float32 -> IEEE half (nearest even) -> float32, bit for bit as the store rounds a float16
// entry's values (lib/store/codec.ts floatToHalf, halfToFloat).
float round_half(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  const uint32_t sign = (b >> 16) & 0x8000;
  const int exp = int((b >> 23) & 0xff);
  uint32_t mant = b & 0x7fffff;
  uint32_t h;
  if (exp == 0xff) {
    h = sign | 0x7c00 | (mant ? 0x200 : 0);
  } else {
    const int e = exp - 127 + 15;
    if (e >= 31) {
      h = sign | 0x7c00;
    } else if (e <= 0) {
      if (e < -10) {
        h = sign;
      } else {
        mant |= 0x800000;
        const int shift = 14 - e;
        uint32_t q = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) ++q;
        h = sign | q;
      }
    } else {
      uint32_t q = (uint32_t(e) << 10) | (mant >> 13);
      const uint32_t rem = mant & 0x1fff;
      if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) ++q;
      h = sign | q;
    }
  }
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  const int he = int((h >> 10) & 0x1f);
  const uint32_t f = h & 0x3ff;
  if (he == 0) return float(s * std::ldexp(double(f), -24));
  if (he == 31) return f ? std::numeric_limits<float>::quiet_NaN() : float(s * HUGE_VAL);
  return float(s * std::ldexp(1.0 + double(f) / 1024.0, he - 15));
}

// float32 -> bfloat16 (nearest even) -> float32 (lib/store/codec.ts floatToBf16).
float round_bf16(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  uint32_t h;
  if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffff)) h = ((b >> 16) & 0x8000) | 0x7fc0;
  else h = uint32_t(((uint64_t(b) + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff);
  uint32_t o = h << 16;
  float r;
  std::memcpy(&r, &o, 4);
  return r;
}

// One block's share of a dot product: sum of products, and the largest |decoded - x| with
// the sum of squares of (decoded - x) / that largest.
struct BlockDot {
  Scaled dot;
  double peak = 0, ssq = 0;  // of the halved differences (0.5 v - 0.5 w cannot overflow)
};

template <typename T, typename TX>
BlockDot dot_block(const Parsed& P, size_t b, PredRound round, const TX* x, bool distance) {
  const Geometry& g = P.g;
  Box bx = block_box(g, b);
  std::unique_ptr<T[]> buf = scratch<T>(bx.count());
  decode_block(P.base + P.off[b], P.off[b + 1] - P.off[b], bx.ext, P.eb, P.info.lossless, buf.get());
  if constexpr (std::is_same_v<T, float>) {
    if (round == PredRound::kFloat16)
      for (size_t i = 0, n = bx.count(); i < n; ++i) buf[i] = round_half(buf[i]);
    else if (round == PredRound::kBfloat16)
      for (size_t i = 0, n = bx.count(); i < n; ++i) buf[i] = round_bf16(buf[i]);
  }
  size_t ast[kDims], bst[kDims];
  strides(g.n5, ast);
  strides(bx.ext, bst);
  const size_t row = bx.ext[4];
  // fn(v, w) for each row of the block and the matching row of x
  auto rows = [&](auto&& fn) {
    for (size_t i0 = 0; i0 < bx.ext[0]; ++i0)
      for (size_t i1 = 0; i1 < bx.ext[1]; ++i1)
        for (size_t i2 = 0; i2 < bx.ext[2]; ++i2)
          for (size_t i3 = 0; i3 < bx.ext[3]; ++i3)
            fn(buf.get() + i0 * bst[0] + i1 * bst[1] + i2 * bst[2] + i3 * bst[3],
               x + (bx.lo[0] + i0) * ast[0] + (bx.lo[1] + i1) * ast[1] + (bx.lo[2] + i2) * ast[2] +
                   (bx.lo[3] + i3) * ast[3] + bx.lo[4]);
  };
  BlockDot r;
  double dot = 0;
  rows([&](const T* v, const TX* w) { dot += tt_detail::dot_mixed(v, w, row); });
  if (std::isfinite(dot) && std::fabs(dot) >= 0x1.0p-900) {
    r.dot = {dot, 0};
  } else {
    // Again with both sides scaled by the powers of two that bring their largest magnitudes in
    // the block into [1, 2): the sum overflowed, or fell where float64 loses digits.
    double mv = 0, mw = 0;
    bool bad = false;
    rows([&](const T* v, const TX* w) {
      for (size_t i = 0; i < row; ++i) {
        const double av = std::fabs(double(v[i])), aw = std::fabs(double(w[i]));
        bad |= !(av <= std::numeric_limits<double>::max() && aw <= std::numeric_limits<double>::max());
        mv = std::max(mv, av);
        mw = std::max(mw, aw);
      }
    });
    if (bad) {
      r.dot = {std::numeric_limits<double>::quiet_NaN(), 0};
    } else if (mv == 0 || mw == 0) {
      r.dot = {0.0, 0};
    } else {
      const int ev = std::ilogb(mv), ew = std::ilogb(mw);
      const double v1 = std::ldexp(1.0, -ev / 2), v2 = std::ldexp(1.0, -ev - (-ev / 2));
      const double w1 = std::ldexp(1.0, -ew / 2), w2 = std::ldexp(1.0, -ew - (-ew / 2));
      double acc = 0;
      rows([&](const T* v, const TX* w) {
        for (size_t i = 0; i < row; ++i) acc += (double(v[i]) * v1 * v2) * (double(w[i]) * w1 * w2);
      });
      r.dot = fold(acc, long(ev) + ew);
    }
  }
  if (distance) {
    rows([&](const T* v, const TX* w) {
      for (size_t i = 0; i < row; ++i) r.peak = std::max(r.peak, std::fabs(0.5 * double(v[i]) - 0.5 * double(w[i])));
    });
    if (r.peak > 0)
      rows([&](const T* v, const TX* w) {
        for (size_t i = 0; i < row; ++i) {
          double d = (0.5 * double(v[i]) - 0.5 * double(w[i])) / r.peak;
          r.ssq += d * d;
        }
      });
  }
  return r;
}

}  // namespace
}  // namespace pred_detail

using namespace pred_detail;

template <typename TX>
std::vector<PredDotResult> pred_dot(const std::vector<PredDotItem>& items, const TX* x, size_t nx, bool distance) {
  std::vector<Parsed> parsed;
  parsed.reserve(items.size());
  std::vector<std::pair<size_t, size_t>> tasks;  // (item, block)
  for (size_t i = 0; i < items.size(); ++i) {
    parsed.push_back(parse(items[i].stream, items[i].size));
    const Parsed& P = parsed.back();
    if (P.g.elems != nx)
      throw TTError(
          "bad_request", "x",
          "x has " + std::to_string(nx) + " elements but the stream's array has " + std::to_string(P.g.elems) + ".");
    if (items[i].round != PredRound::kNone && P.info.f64)
      throw TTError("bad_request", "round", "rounding to a 2-byte float applies to float32 streams only.");
    for (size_t b = 0; b < P.g.blocks; ++b) tasks.push_back({i, b});
  }
  std::vector<BlockDot> part(tasks.size());
  parallel_for(tasks.size(), [&](size_t t) {
    const size_t i = tasks[t].first, b = tasks[t].second;
    const Parsed& P = parsed[i];
    part[t] = P.info.f64 ? dot_block<double>(P, b, items[i].round, x, distance)
                         : dot_block<float>(P, b, items[i].round, x, distance);
  });
  // Block shares summed in block order, so the result does not depend on the thread count; at
  // the largest exponent among them (0 unless a block's share left float64's range).
  std::vector<PredDotResult> out(items.size());
  std::vector<double> peak(items.size(), 0.0), sum(items.size(), 0.0);
  std::vector<int> top(items.size(), std::numeric_limits<int>::min());
  for (size_t t = 0; t < tasks.size(); ++t) {
    const size_t i = tasks[t].first;
    if (part[t].dot.m != 0) top[i] = std::max(top[i], part[t].dot.e);
    peak[i] = std::max(peak[i], part[t].peak);
  }
  for (size_t t = 0; t < tasks.size(); ++t) {
    const size_t i = tasks[t].first;
    if (part[t].dot.m != 0) sum[i] += std::ldexp(part[t].dot.m, part[t].dot.e - top[i]);
  }
  for (size_t i = 0; i < items.size(); ++i)
    out[i].dot = top[i] == std::numeric_limits<int>::min() ? Scaled{} : fold(sum[i], top[i]);
  if (distance) {
    std::vector<double> ssq(items.size(), 0.0);
    for (size_t t = 0; t < tasks.size(); ++t) {
      const size_t i = tasks[t].first;
      if (part[t].peak > 0) {
        double f = part[t].peak / peak[i];
        ssq[i] += part[t].ssq * f * f;
      }
    }
    // ||d|| = 2 * peak * sqrt(ssq) of the halved differences
    for (size_t i = 0; i < items.size(); ++i) {
      int pe = 0;
      const double pm = std::frexp(peak[i], &pe);
      out[i].distance = fold(pm * std::sqrt(ssq[i]), long(pe) + 1);
    }
  }
  return out;
}

template std::vector<PredDotResult> pred_dot<float>(const std::vector<PredDotItem>&, const float*, size_t, bool);
template std::vector<PredDotResult> pred_dot<double>(const std::vector<PredDotItem>&, const double*, size_t, bool);

PredInfo pred_info(const uint8_t* s, size_t n) { return parse(s, n).info; }

Buffer pred_decompress(const uint8_t* s, size_t n, const std::vector<std::pair<size_t, size_t>>& ranges) {
  Parsed P = parse(s, n);
  return P.info.f64 ? decompress_t<double>(P, ranges) : decompress_t<float>(P, ranges);
}

}  // namespace svc
