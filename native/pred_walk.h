// The "pred" codec's predictors: multilevel interpolation (linear or cubic) and Lorenzo, as walks
// over a block that the encoder and the decoder share, so both predict from the same values in
// the same order. Compiled without floating-point contraction (see pred_internal.h).
#pragma once
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "pred_internal.h"

namespace svc {
namespace pred_detail {

// Both walks visit every element of a block once, in an order where each prediction reads only
// elements visited before; q(idx, pred, level) quantises (encoder) or recovers (decoder)
// buf[idx]. Level 1 is the finest; the interpolation's anchor has level kLevels - 1.

// Interpolation from the neighbours ks apart along one dimension, by where the element lies on
// its line: cubic inside, one-sided cubic near an end, linear (also the linear coding's only
// mode), extrapolation or a copy of the left neighbour at the far end.
enum InterpMode { kMid, kCubic, kRight3, kLeft3, kExtrap, kCopy };

inline InterpMode interp_mode(size_t ik, size_t s, size_t n, bool cubic) {
  const bool right = ik + s < n, left3 = ik >= 3 * s, right3 = ik + 3 * s < n;
  if (right) {
    if (!cubic) return kMid;
    if (left3 && right3) return kCubic;
    if (right3) return kRight3;
    if (left3) return kLeft3;
    return kMid;
  }
  return left3 ? kExtrap : kCopy;
}

template <int M, typename T>
inline double interp(const T* p, ptrdiff_t ks) {
  const double a = double(p[-ks]);
  if (M == kMid) return (a + double(p[ks])) * 0.5;
  if (M == kCubic) return (-double(p[-3 * ks]) + 9 * a + 9 * double(p[ks]) - double(p[3 * ks])) * (1.0 / 16);
  if (M == kRight3) return (3 * a + 6 * double(p[ks]) - double(p[3 * ks])) * 0.125;
  if (M == kLeft3) return (-double(p[-3 * ks]) + 6 * a + 3 * double(p[ks])) * 0.125;
  if (M == kExtrap) return 1.5 * a - 0.5 * double(p[-3 * ks]);
  return a;
}

template <typename T>
inline double interp_any(InterpMode m, const T* p, ptrdiff_t ks) {
  switch (m) {
    case kMid:
      return interp<kMid>(p, ks);
    case kCubic:
      return interp<kCubic>(p, ks);
    case kRight3:
      return interp<kRight3>(p, ks);
    case kLeft3:
      return interp<kLeft3>(p, ks);
    case kExtrap:
      return interp<kExtrap>(p, ks);
    default:
      return interp<kCopy>(p, ks);
  }
}

// One row of the innermost dimension (elements base + i, i = beg, beg + step, ... < end), all
// interpolated along another dimension in the same mode.
template <int M, typename T, typename Q>
inline void interp_row(const T* buf, size_t base, size_t beg, size_t end, size_t step, ptrdiff_t ks, int lev, Q& q) {
  for (size_t i = beg; i < end; i += step) q(base + i, interp<M>(buf + base + i, ks), lev);
}

// Levels from coarse to fine; within a level, the dimensions in order, each interpolating the
// elements at odd multiples of the level's stride along it from those already visited.
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
    const int ql = std::min(lev, kLevels - 1);
    for (int k = 0; k < kDims; ++k) {
      if (e[k] <= s) continue;
      size_t beg[kDims], step[kDims];
      for (int j = 0; j < kDims; ++j) {
        beg[j] = j == k ? s : 0;
        step[j] = j < k ? s : 2 * s;
      }
      const size_t n = e[k];
      const ptrdiff_t ks = ptrdiff_t(st[k] * s);
      size_t i[kDims - 1];
      for (i[0] = beg[0]; i[0] < e[0]; i[0] += step[0])
        for (i[1] = beg[1]; i[1] < e[1]; i[1] += step[1])
          for (i[2] = beg[2]; i[2] < e[2]; i[2] += step[2])
            for (i[3] = beg[3]; i[3] < e[3]; i[3] += step[3]) {
              const size_t base = i[0] * st[0] + i[1] * st[1] + i[2] * st[2] + i[3] * st[3];
              if (k == kDims - 1) {
                // Along the row: the mode changes only near its ends.
                for (size_t c = s; c < n; c += 2 * s)
                  q(base + c, interp_any(interp_mode(c, s, n, cubic), buf + base + c, ks), ql);
                continue;
              }
              const size_t b4 = beg[4], e4 = e[4], s4 = step[4];
              switch (interp_mode(i[k], s, n, cubic)) {
                case kMid:
                  interp_row<kMid>(buf, base, b4, e4, s4, ks, ql, q);
                  break;
                case kCubic:
                  interp_row<kCubic>(buf, base, b4, e4, s4, ks, ql, q);
                  break;
                case kRight3:
                  interp_row<kRight3>(buf, base, b4, e4, s4, ks, ql, q);
                  break;
                case kLeft3:
                  interp_row<kLeft3>(buf, base, b4, e4, s4, ks, ql, q);
                  break;
                case kExtrap:
                  interp_row<kExtrap>(buf, base, b4, e4, s4, ks, ql, q);
                  break;
                default:
                  interp_row<kCopy>(buf, base, b4, e4, s4, ks, ql, q);
                  break;
              }
            }
    }
  }
}

// Lorenzo over the last three dimensions (the first two of the padded five are independent).
template <typename T, typename Q>
void walk_lorenzo(const size_t e[kDims], const T* buf, Q&& q) {
  // A q that returns the value it stored at idx (the encoder's quantiser) lets the walk carry the
  // previous element of a row in a register instead of reading it back from buf: the same
  // predictions to the bit, without a store and a load on the row's chain of dependencies.
  constexpr bool kCarry = !std::is_void_v<std::invoke_result_t<Q&, size_t, double, int>>;
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
            const double first = double(p[-ptrdiff_t(sa)]) + double(p[-ptrdiff_t(sb)]) - double(p[-ptrdiff_t(sa + sb)]);
            // the 3-D Lorenzo predictor from the previous element `left` (as stored) and the two earlier rows
            auto pred3 = [&](const T* r, double left) {
              return left + double(r[-ptrdiff_t(sa)]) + double(r[-ptrdiff_t(sb)]) - double(r[-ptrdiff_t(sa) - 1]) -
                     double(r[-ptrdiff_t(sb) - 1]) - double(r[-ptrdiff_t(sa + sb)]) +
                     double(r[-ptrdiff_t(sa + sb) - 1]);
            };
            if constexpr (kCarry) {
              double left = double(q(row, first, 1));
              for (size_t c = 1; c < e[4]; ++c) left = double(q(row + c, pred3(p + c, left), 1));
            } else {
              q(row, first, 1);
              for (size_t c = 1; c < e[4]; ++c) q(row + c, pred3(p + c, double(p[c - 1])), 1);
            }
          } else if (a > 0 || b > 0) {
            const ptrdiff_t o = a > 0 ? ptrdiff_t(sa) : ptrdiff_t(sb);
            if constexpr (kCarry) {
              double left = double(q(row, double(p[-o]), 1));
              for (size_t c = 1; c < e[4]; ++c) {
                const T* r = p + c;
                left = double(q(row + c, left + double(r[-o]) - double(r[-o - 1]), 1));
              }
            } else {
              q(row, double(p[-o]), 1);
              for (size_t c = 1; c < e[4]; ++c) {
                const T* r = p + c;
                q(row + c, double(r[-1]) + double(r[-o]) - double(r[-o - 1]), 1);
              }
            }
          } else {
            if constexpr (kCarry) {
              double left = double(q(row, 0.0, 1));
              for (size_t c = 1; c < e[4]; ++c) left = double(q(row + c, left, 1));
            } else {
              q(row, 0.0, 1);
              for (size_t c = 1; c < e[4]; ++c) q(row + c, double(p[c - 1]), 1);
            }
          }
        }
}

template <typename T, typename Q>
void walk(uint8_t kind, const size_t e[kDims], const T* buf, Q&& q) {
  if (kind == kLorenzo) walk_lorenzo(e, buf, q);
  else walk_interp(e, buf, kind == kInterpCubic, q);
}

}  // namespace pred_detail
}  // namespace svc
