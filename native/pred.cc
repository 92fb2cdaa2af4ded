// The "pred" codec: see pred.h and docs/codecs.md. This file is the encoder's search for the
// bound: a pointwise bound calibrated on samples, then passes over the whole array that quantise
// every block (in parallel) until the errors the decoder will reproduce meet the tolerance; only
// the pass kept is entropy-coded. Blocks are coded by pred_block.cc and pred_lossless.cc, the
// stream laid out and decoded by pred_stream.cc.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "pred_internal.h"
#include "threads.h"

namespace svc {
using namespace pred_detail;
namespace {

template <typename T>
double max_abs_of(const T* x, size_t n) {
  // four independent maxima (the same result: max is exact in any order), so the loop is not one
  // chain of dependent comparisons
  double m0 = 0, m1 = 0, m2 = 0, m3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    m0 = std::max(m0, std::fabs(double(x[i])));
    m1 = std::max(m1, std::fabs(double(x[i + 1])));
    m2 = std::max(m2, std::fabs(double(x[i + 2])));
    m3 = std::max(m3, std::fabs(double(x[i + 3])));
  }
  for (; i < n; ++i) m0 = std::max(m0, std::fabs(double(x[i])));
  return std::max(std::max(m0, m1), std::max(m2, m3));
}

// The data's peak |x| and sum of (x / peak)^2 (scaled so float64 extremes do not overflow).
template <typename T>
void norms(const T* data, size_t n, double& scale, double& xsq) {
  scale = max_abs_of(data, n);
  xsq = 0;
  if (!(scale > 0)) return;
  // four partial sums of (x * (1 / peak))^2: independent chains of additions, no division
  const double inv = 1 / scale;
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const double v0 = double(data[i]) * inv, v1 = double(data[i + 1]) * inv;
    const double v2 = double(data[i + 2]) * inv, v3 = double(data[i + 3]) * inv;
    s0 += v0 * v0;
    s1 += v1 * v1;
    s2 += v2 * v2;
    s3 += v3 * v3;
  }
  for (; i < n; ++i) {
    const double v = double(data[i]) * inv;
    s0 += v * v;
  }
  xsq = (s0 + s1) + (s2 + s3);
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

// Quantises the sample boxes with bound eb (each box's coding chosen at that bound): squared
// error (scaled) and, when `sized`, the payload bytes (entropy-coded).
template <typename T>
void try_samples(const T* data, const Geometry& g, const std::vector<Box>& boxes, double eb, double inv_scale,
                 bool sized, size_t& bytes, double& sse, size_t& elems) {
  std::vector<size_t> sizes(boxes.size(), 0);
  std::vector<Stats> errs(boxes.size());
  parallel_for(boxes.size(), [&](size_t i) {
    std::unique_ptr<T[]> buf = scratch<T>(boxes[i].count());
    copy_box<T, true>(const_cast<T*>(data), g.n5, boxes[i], buf.get());
    if (eb == 0) {
      sizes[i] = encode_lossless_block(buf.get(), boxes[i].ext).size() + 4;
      return;
    }
    Quantised<T> q;
    quantise_block(buf.get(), boxes[i].ext, eb, pick_coding(buf.get(), boxes[i].ext, eb, inv_scale), inv_scale, q);
    errs[i] = q.st;
    if (sized) {
      bool raw;
      sizes[i] = emit_block(q, buf.get(), &raw).size() + 4;
    }
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
        try_samples(data, g, boxes, std::min(t, eb), 1 / scale, ratio != nullptr, bytes, sse, elems);
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

// One pass over the whole array at bound eb: every block quantised, not yet entropy-coded.
template <typename T>
struct Pass {
  double eb = 0;
  std::vector<Quantised<T>> blocks;
  Stats st;
};

// picks[b] < 0: choose block b's coding (kept for later passes).
template <typename T>
void run_pass(const T* data, const Geometry& g, double eb, double inv_scale, std::vector<int>& picks, Pass<T>& p) {
  p.eb = eb;
  p.blocks.resize(g.blocks);
  picks.resize(g.blocks, -1);
  parallel_for(g.blocks, [&](size_t b) {
    Box bx = block_box(g, b);
    std::unique_ptr<T[]> buf = scratch<T>(bx.count());
    copy_box<T, true>(const_cast<T*>(data), g.n5, bx, buf.get());
    if (picks[b] < 0) picks[b] = pick_coding(buf.get(), bx.ext, eb, inv_scale);
    quantise_block(buf.get(), bx.ext, eb, picks[b], inv_scale, p.blocks[b]);
  });
  p.st = Stats();
  for (const Quantised<T>& q : p.blocks) p.st.add(q.st);
}

// Entropy-codes a pass into a stream; *st gets its errors (a block stored raw has none).
template <typename T>
std::vector<uint8_t> emit_pass(const T* data, const Geometry& g, Pass<T>& p, Stats* st) {
  std::vector<std::vector<uint8_t>> parts(g.blocks);
  std::vector<uint8_t> raw(g.blocks, 0);
  parallel_for(g.blocks, [&](size_t b) {
    Box bx = block_box(g, b);
    std::unique_ptr<T[]> buf = scratch<T>(bx.count());
    copy_box<T, true>(const_cast<T*>(data), g.n5, bx, buf.get());
    bool r;
    parts[b] = emit_block(p.blocks[b], buf.get(), &r);
    raw[b] = r;
    p.blocks[b].codes.reset();
  });
  *st = Stats();
  for (size_t b = 0; b < g.blocks; ++b)
    if (!raw[b]) st->add(p.blocks[b].st);
  return write_stream<T>(g, p.eb, parts);
}

template <typename T>
std::vector<uint8_t> encode_lossless_all(const T* data, const Geometry& g) {
  std::vector<std::vector<uint8_t>> parts(g.blocks);
  parallel_for(g.blocks, [&](size_t b) {
    Box bx = block_box(g, b);
    std::unique_ptr<T[]> buf = scratch<T>(bx.count());
    copy_box<T, true>(const_cast<T*>(data), g.n5, bx, buf.get());
    parts[b] = encode_lossless_block(buf.get(), bx.ext);
  });
  return write_stream<T>(g, 0, parts);
}

}  // namespace

template <typename T>
PredStream pred_compress(const T* data, const std::vector<size_t>& shape, double tolerance, double max_abs) {
  Geometry g = geometry_for(shape);
  const size_t n = g.elems;
  double scale, xsq;
  norms(data, n, scale, xsq);
  double eb = initial_bound(data, g, tolerance, max_abs, scale, xsq, 8, 3, nullptr);
  // Search the bound: the largest that held (lo) and the smallest that missed (hi) bracket it;
  // the Frobenius error is not monotone in the bound on every input (integer-valued data), so a
  // step that lands outside the bracket bisects it. A pass is judged on the encoder's
  // reconstruction, which the decoder reproduces bit for bit (the same expressions, rounded to
  // the element type); its errors are summed block by block, so the tolerance is held with a
  // margin for the rounding of the sums. The pass kept is the loosest that held.
  const double inv_scale = scale > 0 ? 1 / scale : 1;
  auto rel_of = [&](const Stats& st) {
    return xsq > 0 ? std::sqrt(st.sse) / std::sqrt(xsq) : (st.maxe > 0 ? INFINITY : 0);
  };
  auto holds = [&](double rel, double maxe) {
    return (max_abs < 0 || maxe <= max_abs) && (tolerance < 0 || rel <= tolerance * (1 - 1e-9));
  };
  std::vector<int> picks;
  Pass<T> best, cur;
  bool have = false;
  double lo = 0, hi = INFINITY;
  for (int attempt = 0; eb > 0 && attempt < 12; ++attempt) {
    run_pass(data, g, eb, inv_scale, picks, cur);
    const double rel = rel_of(cur.st);
    const bool ok = holds(rel, cur.st.maxe);
    bool finish = false;
    double next = eb;
    if (ok) {
      lo = std::max(lo, eb);
      if (!have || eb > best.eb) {
        std::swap(best, cur);
        have = true;
      }
      // Well below the tolerance (the calibration is approximate): try a looser bound.
      if (tolerance <= 0 || !(rel < 0.85 * tolerance) || (max_abs >= 0 && eb >= max_abs)) finish = true;
      else next = eb * (rel > 0 ? std::min(2.0, 0.97 * tolerance / rel) : 2.0);
    } else {
      hi = std::min(hi, eb);
      double f = 0.5;
      if (tolerance >= 0 && rel > tolerance && std::isfinite(rel))
        f = std::min(0.97, std::max(0.25, 0.97 * tolerance / rel));
      next = eb * f;
    }
    if (have && (hi / lo < 1.06 || attempt >= 5)) finish = true;
    if (finish) break;
    if (next <= lo || next >= hi) next = lo > 0 ? std::sqrt(lo * (std::isfinite(hi) ? hi : 2 * lo)) : next;
    eb = max_abs >= 0 ? std::min(max_abs, next) : next;
  }
  PredStream r;
  Stats st;
  // No bound held (or the bound is 0): the lossless stream, which always does.
  r.bytes = have ? emit_pass(data, g, best, &st) : encode_lossless_all(data, g);
  r.max_abs_error = st.maxe;
  r.relative_error = rel_of(st);
  return r;
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
  try_samples(data, g, boxes, eb, scale > 0 ? 1 / scale : 1, true, bytes, sse, elems);
  return double(elems * sizeof(T)) / double(bytes);
}

template PredStream pred_compress<float>(const float*, const std::vector<size_t>&, double, double);
template PredStream pred_compress<double>(const double*, const std::vector<size_t>&, double, double);
template double pred_estimate<float>(const float*, const std::vector<size_t>&, double, double);
template double pred_estimate<double>(const double*, const std::vector<size_t>&, double, double);

}  // namespace svc
