#include "linalg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "gemm.h"
#include "linalg_simd.h"
#include "threads.h"

namespace svc {

namespace {
void tred2_fused(size_t n, double* W, double* d, double* e, double* hv);
}  // namespace

// Tridiagonalisation (EISPACK tred2, as in JAMA). JAMA's V(i, j) is stored at W[j*n + i]
// (transposed) so that its column sweeps, the O(n^3) part, run over contiguous memory.
// On return W^T holds the orthogonal transformation, d the diagonal, e the subdiagonal.
static void tred2(size_t n, double* W, double* d, double* e) {
  auto v = [&](size_t i, size_t j) -> double& { return W[j * n + i]; };
  for (size_t j = 0; j < n; ++j) d[j] = v(n - 1, j);
  for (size_t i = n - 1; i > 0; --i) {
    double scale = 0.0, h = 0.0;
    for (size_t k = 0; k < i; ++k) scale += std::fabs(d[k]);
    if (scale == 0.0) {
      e[i] = d[i - 1];
      for (size_t j = 0; j < i; ++j) {
        d[j] = v(i - 1, j);
        v(i, j) = 0.0;
        v(j, i) = 0.0;
      }
    } else {
      for (size_t k = 0; k < i; ++k) {
        d[k] /= scale;
        h += d[k] * d[k];
      }
      double f = d[i - 1];
      double g = std::sqrt(h);
      if (f > 0) g = -g;
      e[i] = scale * g;
      h = h - f * g;
      d[i - 1] = f - g;
      for (size_t j = 0; j < i; ++j) e[j] = 0.0;
      for (size_t j = 0; j < i; ++j) {
        f = d[j];
        v(j, i) = f;
        g = e[j] + v(j, j) * f;
        const double* wj = W + j * n;
#pragma omp simd reduction(+ : g)
        for (size_t k = j + 1; k <= i - 1; ++k) {
          g += wj[k] * d[k];
          e[k] += wj[k] * f;
        }
        e[j] = g;
      }
      f = 0.0;
      for (size_t j = 0; j < i; ++j) {
        e[j] /= h;
        f += e[j] * d[j];
      }
      double hh = f / (h + h);
      for (size_t j = 0; j < i; ++j) e[j] -= hh * d[j];
      for (size_t j = 0; j < i; ++j) {
        f = d[j];
        g = e[j];
        double* wj = W + j * n;
#pragma omp simd
        for (size_t k = j; k <= i - 1; ++k) wj[k] -= (f * e[k] + g * d[k]);
        d[j] = v(i - 1, j);
        v(i, j) = 0.0;
      }
    }
    d[i] = h;
  }
  {
    for (size_t i = 0; i + 1 < n; ++i) {
      v(n - 1, i) = v(i, i);
      v(i, i) = 1.0;
      double h = d[i + 1];
      if (h != 0.0) {
        for (size_t k = 0; k <= i; ++k) d[k] = v(k, i + 1) / h;
        const double* wi = W + (i + 1) * n;
        // Rows j <= i are independent of each other (row i + 1 is only read): split over the
        // pool once they are long enough to pay for it.
        auto rows = [&](size_t j0, size_t j1) {
          for (size_t j = j0; j < j1; ++j) {
            double* wj = W + j * n;
            double g = 0.0;
#pragma omp simd reduction(+ : g)
            for (size_t k = 0; k <= i; ++k) g += wi[k] * wj[k];
#pragma omp simd
            for (size_t k = 0; k <= i; ++k) wj[k] -= g * d[k];
          }
        };
        if (i >= 192) {
          const size_t parts = 4 * size_t(pool_threads()), len = (i + 1 + parts - 1) / parts;
          parallel_for(parts, [&](size_t p) { rows(std::min(i + 1, p * len), std::min(i + 1, (p + 1) * len)); });
        } else {
          rows(0, i + 1);
        }
      }
      for (size_t k = 0; k <= i; ++k) v(k, i + 1) = 0.0;
    }
    for (size_t j = 0; j < n; ++j) {
      d[j] = v(n - 1, j);
      v(n - 1, j) = 0.0;
    }
    v(n - 1, n - 1) = 1.0;
  }
  e[0] = 0.0;
}

// Implicit QL on the tridiagonal (d, e). Zt is the transposed eigenvector matrix (row j =
// vector j); null when only values are wanted. The rotations of one QL step are recorded and
// then applied to Zt in column blocks, one per thread (the columns are independent).
static void tql2(size_t n, double* d, double* e, double* Zt) {
  for (size_t i = 1; i < n; ++i) e[i - 1] = e[i];
  e[n - 1] = 0.0;
  double f = 0.0, tst1 = 0.0;
  const double eps = std::ldexp(1.0, -52);
  std::vector<double> cs(Zt ? n : 0), sn(Zt ? n : 0);
  // One block of columns per thread: each streams its part of rows m..l once per step.
  const size_t blocks = std::min<size_t>(size_t(pool_threads()), std::max<size_t>(1, n / 64));
  const size_t kCols = (n + blocks - 1) / blocks;
  auto rotate = [&](size_t l, size_t m, size_t b) {
    size_t k0 = b * kCols, k1 = std::min(n, k0 + kCols);
    for (size_t ii = m; ii-- > l;) {
      double c = cs[ii], s = sn[ii];
      double* zi = Zt + ii * n;
      double* zi1 = Zt + (ii + 1) * n;
#pragma omp simd
      for (size_t k = k0; k < k1; ++k) {
        double hk = zi1[k];
        zi1[k] = s * zi[k] + c * hk;
        zi[k] = c * zi[k] - s * hk;
      }
    }
  };
  for (size_t l = 0; l < n; ++l) {
    tst1 = std::max(tst1, std::fabs(d[l]) + std::fabs(e[l]));
    size_t m = l;
    while (m < n) {
      if (std::fabs(e[m]) <= eps * tst1) break;
      ++m;
    }
    if (m == n) m = n - 1;
    if (m > l) {
      int iter = 0;
      do {
        ++iter;
        double g = d[l];
        double p = (d[l + 1] - g) / (2.0 * e[l]);
        double r = std::hypot(p, 1.0);
        if (p < 0) r = -r;
        d[l] = e[l] / (p + r);
        d[l + 1] = e[l] * (p + r);
        double dl1 = d[l + 1];
        double h = g - d[l];
        for (size_t i = l + 2; i < n; ++i) d[i] -= h;
        f += h;
        p = d[m];
        double c = 1.0, c2 = c, c3 = c;
        double el1 = e[l + 1];
        double s = 0.0, s2 = 0.0;
        for (size_t ii = m; ii-- > l;) {
          size_t i = ii;
          c3 = c2;
          c2 = c;
          s2 = s;
          g = c * e[i];
          h = c * p;
          r = std::hypot(p, e[i]);
          e[i + 1] = s * r;
          s = e[i] / r;
          c = p / r;
          p = c * d[i] - s * g;
          d[i + 1] = h + s * (c * g + s * d[i]);
          if (Zt) {
            cs[i] = c;
            sn[i] = s;
          }
        }
        if (Zt) {
          // Small steps are not worth a hand-off to the pool.
          if ((m - l) * n >= (size_t(1) << 15)) parallel_for(blocks, [&](size_t b) { rotate(l, m, b); });
          else
            for (size_t b = 0; b < blocks; ++b) rotate(l, m, b);
        }
        p = -s * s2 * c3 * el1 * e[l] / dl1;
        e[l] = s * p;
        d[l] = c * p;
      } while (std::fabs(e[l]) > eps * tst1 && iter < 60);
    }
    d[l] += f;
    e[l] = 0.0;
  }
}

void sym_eig(size_t n, double* A, double* w, double* vecs) {
  if (n == 0) return;
  if (n == 1) {
    w[0] = A[0];
    if (vecs) vecs[0] = 1.0;
    return;
  }
  std::vector<double> d(n), e(n);
  if (!vecs) {
    // Values only: the fused, vectorised tridiagonalisation of sym_tridiag.
    std::vector<double> h(n);
    tred2_fused(n, A, d.data(), e.data(), h.data());
    tql2(n, d.data(), e.data(), nullptr);
    std::sort(d.begin(), d.end(), [](double a, double b) { return a > b; });
    std::copy(d.begin(), d.end(), w);
    return;
  }
  tred2(n, A, d.data(), e.data());
  // A now holds the transformation transposed: row j is what tql2 rotates into eigenvector j.
  std::vector<double> Zt;
  if (vecs) Zt.assign(A, A + n * n);
  tql2(n, d.data(), e.data(), vecs ? Zt.data() : nullptr);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return d[a] > d[b]; });
  for (size_t j = 0; j < n; ++j) {
    w[j] = d[order[j]];
    if (vecs) std::copy(Zt.begin() + order[j] * n, Zt.begin() + (order[j] + 1) * n, vecs + j * n);
  }
}

void qr(size_t m, size_t n, const double* A, std::vector<double>& Q, std::vector<double>& R) {
  size_t k = std::min(m, n);
  std::vector<double> a(A, A + m * n);
  std::vector<std::vector<double>> vs(k);
  std::vector<double> w(n);
  for (size_t j = 0; j < k; ++j) {
    double norm2 = 0;
    for (size_t i = j; i < m; ++i) norm2 += a[i * n + j] * a[i * n + j];
    double norm = std::sqrt(norm2);
    std::vector<double>& v = vs[j];
    v.assign(m - j, 0.0);
    if (norm == 0.0) continue;
    double x0 = a[j * n + j];
    double alpha = x0 > 0 ? -norm : norm;
    for (size_t i = j; i < m; ++i) v[i - j] = a[i * n + j];
    v[0] -= alpha;
    double vv = 0;
    for (double x : v) vv += x * x;
    if (vv == 0.0) {
      v.assign(m - j, 0.0);
      continue;
    }
    double scale = 1.0 / std::sqrt(vv);
    for (double& x : v) x *= scale;  // unit v: H = I - 2 v v^T
    std::fill(w.begin(), w.end(), 0.0);
    for (size_t i = j; i < m; ++i) {
      double vi = v[i - j];
      const double* row = &a[i * n];
      for (size_t c = j; c < n; ++c) w[c] += vi * row[c];
    }
    for (size_t i = j; i < m; ++i) {
      double vi = 2.0 * v[i - j];
      double* row = &a[i * n];
      for (size_t c = j; c < n; ++c) row[c] -= vi * w[c];
    }
  }
  R.assign(k * n, 0.0);
  for (size_t i = 0; i < k; ++i)
    for (size_t c = i; c < n; ++c) R[i * n + c] = a[i * n + c];
  Q.assign(m * k, 0.0);
  for (size_t i = 0; i < k; ++i) Q[i * k + i] = 1.0;
  std::vector<double> wq(k);
  for (size_t jj = k; jj-- > 0;) {
    const std::vector<double>& v = vs[jj];
    std::fill(wq.begin(), wq.end(), 0.0);
    for (size_t i = jj; i < m; ++i) {
      double vi = v[i - jj];
      if (vi == 0.0) continue;
      const double* row = &Q[i * k];
      for (size_t c = 0; c < k; ++c) wq[c] += vi * row[c];
    }
    for (size_t i = jj; i < m; ++i) {
      double vi = 2.0 * v[i - jj];
      if (vi == 0.0) continue;
      double* row = &Q[i * k];
      for (size_t c = 0; c < k; ++c) row[c] -= vi * wq[c];
    }
  }
}

bool chol_inverse(size_t n, const double* G, double* Rinv, double floor) {
  // R upper triangular, row-major, R^T R = G (right-looking on the upper triangle).
  std::vector<double> R(G, G + n * n);
  for (size_t j = 0; j < n; ++j) {
    double piv = R[j * n + j];
    if (!(piv > floor * G[j * n + j]) || !(G[j * n + j] > 0)) return false;
    double r = std::sqrt(piv);
    R[j * n + j] = r;
    double inv = 1.0 / r;
    for (size_t c = j + 1; c < n; ++c) R[j * n + c] *= inv;
    for (size_t i = j + 1; i < n; ++i) {
      double a = R[j * n + i];
      if (a == 0.0) continue;
      double* row = &R[i * n];
      const double* rj = &R[j * n];
#pragma omp simd
      for (size_t c = i; c < n; ++c) row[c] -= a * rj[c];
    }
  }
  // Rinv: upper triangular inverse, column by column of the identity (back substitution).
  std::fill(Rinv, Rinv + n * n, 0.0);
  for (size_t i = n; i-- > 0;) {
    Rinv[i * n + i] = 1.0 / R[i * n + i];
    for (size_t c = i + 1; c < n; ++c) {
      double s = 0;
      for (size_t k = i + 1; k <= c; ++k) s += R[i * n + k] * Rinv[k * n + c];
      Rinv[i * n + c] = -s / R[i * n + i];
    }
  }
  return true;
}

}  // namespace svc

namespace svc {

void jacobi_svd(size_t rows, size_t cols, const double* A, std::vector<double>& U, std::vector<double>& S,
                std::vector<double>& V) {
  // Column-major working copies so that rotations touch contiguous memory.
  std::vector<double> a(rows * cols), v(cols * cols, 0.0);
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j) a[j * rows + i] = A[i * cols + j];
  for (size_t j = 0; j < cols; ++j) v[j * cols + j] = 1.0;
  const double tol = 1e-15;
  // Pairs of columns whose inner product is below 1e-30 of |A|_F^2 are left alone: rotating
  // them changes nothing above float64's absolute precision, and the noise columns of a
  // rank-deficient matrix would otherwise keep every sweep busy.
  double fro2 = 0;
  for (double x : a) fro2 += x * x;
  const double tiny = 1e-30 * fro2;
  for (int sweep = 0; sweep < 80; ++sweep) {
    bool rotated = false;
    for (size_t p = 0; p + 1 < cols; ++p)
      for (size_t q = p + 1; q < cols; ++q) {
        double* ap = &a[p * rows];
        double* aq = &a[q * rows];
        double alpha = 0, beta = 0, gamma = 0;
        for (size_t i = 0; i < rows; ++i) {
          alpha += ap[i] * ap[i];
          beta += aq[i] * aq[i];
          gamma += ap[i] * aq[i];
        }
        if (gamma == 0.0 || std::fabs(gamma) <= tol * std::sqrt(alpha * beta) || std::fabs(gamma) <= tiny) continue;
        rotated = true;
        double zeta = (beta - alpha) / (2.0 * gamma);
        double t = (zeta >= 0 ? 1.0 : -1.0) / (std::fabs(zeta) + std::sqrt(1.0 + zeta * zeta));
        double c = 1.0 / std::sqrt(1.0 + t * t), s = c * t;
        for (size_t i = 0; i < rows; ++i) {
          double x = ap[i], y = aq[i];
          ap[i] = c * x - s * y;
          aq[i] = s * x + c * y;
        }
        double* vp = &v[p * cols];
        double* vq = &v[q * cols];
        for (size_t i = 0; i < cols; ++i) {
          double x = vp[i], y = vq[i];
          vp[i] = c * x - s * y;
          vq[i] = s * x + c * y;
        }
      }
    if (!rotated) break;
  }
  std::vector<double> norms(cols);
  for (size_t j = 0; j < cols; ++j) {
    double s = 0;
    for (size_t i = 0; i < rows; ++i) s += a[j * rows + i] * a[j * rows + i];
    norms[j] = std::sqrt(s);
  }
  std::vector<size_t> order(cols);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return norms[x] > norms[y]; });
  U.assign(rows * cols, 0.0);
  S.assign(cols, 0.0);
  V.assign(cols * cols, 0.0);
  for (size_t jj = 0; jj < cols; ++jj) {
    size_t j = order[jj];
    S[jj] = norms[j];
    double inv = norms[j] > 0 ? 1.0 / norms[j] : 0.0;
    for (size_t i = 0; i < rows; ++i) U[i * cols + jj] = a[j * rows + i] * inv;
    for (size_t i = 0; i < cols; ++i) V[i * cols + jj] = v[j * cols + i];
  }
}

}  // namespace svc

namespace svc {

namespace {

// Householder tridiagonalisation as tred2 above (same reflectors, same T), with the update of
// step i and the matrix-vector product of step i - 1 done in one pass over the triangle (each
// entry read and written once per step instead of read twice and written once), split over the
// pool in bands of equal area with a private accumulator each. W: JAMA's V transposed, as in
// tred2; on return row i starts with u_i, h[i] = |u_i|^2 / 2, d and e hold T.
void tred2_fused(size_t n, double* W, double* d, double* e, double* hv) {
  auto at = [&](size_t i, size_t j) -> double& { return W[j * n + i]; };  // JAMA's V(i, j)
  std::vector<double> u(n), q(n), p(n), un(n);
  const size_t threads = size_t(pool_threads());
  std::vector<std::vector<double>> part(threads, std::vector<double>(n));
  for (size_t j = 0; j < n; ++j) d[j] = at(n - 1, j);
  bool have_p = false;  // p already holds A_i u for this step (from the previous step's pass)
  // Householder vector of the row x[0..i) (into u, scaled); returns false when x is zero.
  auto house = [&](size_t i, const double* x, double* uo, double& h, double& ei) {
    double scale = 0.0;
    for (size_t k = 0; k < i; ++k) scale += std::fabs(x[k]);
    if (scale == 0.0) {
      ei = x[i - 1];
      h = 0.0;
      return false;
    }
    double hh = 0.0;
    for (size_t k = 0; k < i; ++k) {
      uo[k] = x[k] / scale;
      hh += uo[k] * uo[k];
    }
    const double f = uo[i - 1];
    double g = std::sqrt(hh);
    if (f > 0) g = -g;
    ei = scale * g;
    h = hh - f * g;
    uo[i - 1] = f - g;
    return true;
  };
  double h = 0.0;
  bool live = house(n - 1, d, u.data(), h, e[n - 1]);
  for (size_t i = n - 1; i > 0; --i) {
    // Step i: u (scaled), h and e[i] are set; A_i is the leading i x i block.
    if (!live) {
      hv[i] = 0.0;
      for (size_t j = 0; j < i; ++j) {
        d[j] = at(i - 1, j);
        at(i, j) = 0.0;
        at(j, i) = 0.0;
      }
      d[i] = at(i, i);
      have_p = false;
      if (i > 1) live = house(i - 1, d, u.data(), h, e[i - 1]);
      continue;
    }
    hv[i] = h;
    for (size_t j = 0; j < i; ++j) at(j, i) = u[j];  // row i of W: the reflector
    if (!have_p) LK().symv(W, n, i, u.data(), p.data());
    // q = p / h - (u^T p / 2h^2) u
    double f = 0.0;
    for (size_t j = 0; j < i; ++j) {
      q[j] = p[j] / h;
      f += q[j] * u[j];
    }
    const double hh = f / (h + h);
    for (size_t j = 0; j < i; ++j) q[j] -= hh * u[j];
    // Row i - 1 of the updated block (column i - 1 of W's rows): the next step's x.
    for (size_t j = 0; j < i; ++j) {
      double& a = at(i - 1, j);
      a -= u[j] * q[i - 1] + q[j] * u[i - 1];
      d[j] = a;
      at(i, j) = 0.0;
    }
    d[i] = at(i, i);
    const size_t b = i - 1;  // next block
    double hn = 0.0;
    bool next = b > 0 && house(b, d, un.data(), hn, e[b]);
    // Update A_b -= u q^T + q u^T (entries k < b of rows j < b) and, when there is a next
    // reflector, accumulate p = A_b' un in the same pass.
    const double* x = next ? un.data() : nullptr;
    auto band = [&](size_t j0, size_t j1, double* acc) { LK().band(W, n, b, j0, j1, u.data(), q.data(), x, acc); };
    const size_t parts = b >= 384 ? threads : 1;
    if (parts <= 1) {
      if (next) std::fill(p.begin(), p.begin() + b, 0.0);
      band(0, b, p.data());
    } else {
      // Bands of equal area: row j holds b - j entries.
      std::vector<size_t> cut(parts + 1, b);
      cut[0] = 0;
      for (size_t t = 1; t < parts; ++t)
        cut[t] = size_t(double(b) * (1.0 - std::sqrt(1.0 - double(t) / double(parts))));
      parallel_for(parts, [&](size_t t) {
        double* acc = part[t].data();
        if (next) std::fill(acc, acc + b, 0.0);
        band(cut[t], cut[t + 1], acc);
      });
      if (next)
        for (size_t k = 0; k < b; ++k) {
          double s = 0.0;
          for (size_t t = 0; t < parts; ++t) s += part[t][k];
          p[k] = s;
        }
    }
    have_p = next;
    live = next;
    if (next) {
      std::swap(u, un);
      h = hn;
    } else if (b > 0) {
      // x was zero: the next step reflects nothing.
      e[b] = d[b - 1];
    }
  }
  hv[0] = 0.0;
  for (size_t j = 0; j < n; ++j) d[j] = W[j * n + j];
  e[0] = 0.0;
}

}  // namespace

void sym_tridiag(size_t n, const double* A, SymTridiag& t) {
  t.n = n;
  t.W.assign(A, A + n * n);
  t.h.assign(n, 0.0);
  t.d.assign(n, 0.0);
  t.e.assign(n, 0.0);
  t.w.assign(n, 0.0);
  if (n == 0) return;
  if (n == 1) {
    t.d[0] = t.w[0] = A[0];
    return;
  }
  tred2_fused(n, t.W.data(), t.d.data(), t.e.data(), t.h.data());
  std::vector<double> d(t.d), e(t.e);
  tql2(n, d.data(), e.data(), nullptr);
  std::sort(d.begin(), d.end(), [](double a, double b) { return a > b; });
  t.w.swap(d);
}

namespace {

// LU factorisation with partial pivoting of the tridiagonal T - lambda I (T: diagonal d, e[i]
// between i - 1 and i): U has the diagonal u0 and two superdiagonals u1, u2; row i + 1 was
// swapped with row i when sw[i]; ml[i] is the multiplier of step i. Pivots smaller than tiny
// (T - lambda I is singular to working precision at an eigenvalue) become tiny, with their sign.
struct TriLU {
  std::vector<double> u0, u1, u2, ml;
  std::vector<char> sw;
  void factor(size_t n, const double* d, const double* e, double lambda, double tiny) {
    u0.assign(n, 0.0);
    u1.assign(n, 0.0);
    u2.assign(n, 0.0);
    ml.assign(n, 0.0);
    sw.assign(n, 0);
    u0[0] = d[0] - lambda;
    if (n > 1) u1[0] = e[1];
    for (size_t i = 0; i + 1 < n; ++i) {
      const double c = e[i + 1], a = d[i + 1] - lambda, b = i + 2 < n ? e[i + 2] : 0.0;
      if (std::fabs(c) > std::fabs(u0[i])) {
        const double m = u0[i] / c, t1 = u1[i];
        sw[i] = 1;
        ml[i] = m;
        u0[i] = c;
        u1[i] = a;
        u2[i] = b;
        u0[i + 1] = t1 - m * a;
        u1[i + 1] = -m * b;
      } else {
        if (std::fabs(u0[i]) < tiny) u0[i] = u0[i] < 0 ? -tiny : tiny;
        const double m = c / u0[i];
        ml[i] = m;
        u2[i] = 0.0;
        u0[i + 1] = a - m * u1[i];
        u1[i + 1] = b;
      }
    }
    if (std::fabs(u0[n - 1]) < tiny) u0[n - 1] = u0[n - 1] < 0 ? -tiny : tiny;
  }
  // x = (T - lambda I)^{-1} y, in place.
  void solve(size_t n, double* y) const {
    for (size_t i = 0; i + 1 < n; ++i) {
      if (sw[i]) std::swap(y[i], y[i + 1]);
      y[i + 1] -= ml[i] * y[i];
    }
    for (size_t i = n; i-- > 0;) {
      double s = y[i];
      if (i + 1 < n) s -= u1[i] * y[i + 1];
      if (i + 2 < n) s -= u2[i] * y[i + 2];
      y[i] = s / u0[i];
    }
  }
};

// Rows of Z (count x n, each a vector in the tridiagonal basis) mapped to A's basis in place:
// z <- P_{n-1} ... P_1 z, P_i = I - u_i u_i^T / h_i. Rows go in blocks so that each reflector is
// read once per block; blocks are split over the pool.
void back_transform(const SymTridiag& t, double* Z, size_t count) {
  const size_t n = t.n, kRows = 16;
  const size_t blocks = (count + kRows - 1) / kRows;
  auto run = [&](size_t b) {
    const size_t r0 = b * kRows, r1 = std::min(count, r0 + kRows);
    LK().reflect(t.W.data(), t.h.data(), n, Z + r0 * n, r1 - r0);
  };
  if (blocks > 1 && count * n >= (size_t(1) << 14)) parallel_for(blocks, run);
  else
    for (size_t b = 0; b < blocks; ++b) run(b);
}

}  // namespace

void sym_tridiag_vectors(const SymTridiag& t, size_t lo, size_t hi, std::vector<double>& vecs) {
  const size_t n = t.n, k = hi - lo;
  vecs.assign(k * n, 0.0);
  if (k == 0) return;
  if (n == 1) {
    vecs[0] = 1.0;
    return;
  }
  const double eps = std::ldexp(1.0, -52);
  double tnorm = 0.0;
  for (size_t i = 0; i < n; ++i)
    tnorm = std::max(tnorm, std::fabs(t.d[i]) + std::fabs(t.e[i]) + (i + 1 < n ? std::fabs(t.e[i + 1]) : 0.0));
  if (tnorm == 0.0) tnorm = 1.0;
  const double tiny = eps * tnorm;
  // Eigenvalues closer than this are one cluster: their vectors are kept orthogonal explicitly
  // (further apart, inverse iteration makes them orthogonal to ~eps |T| / gap).
  const double cluster_gap = 1e-3 * tnorm;
  // Converged: the residual |(T - lambda I) x| of the unit x is below 100 sqrt(n) eps |T|.
  const double growth_ok = 1.0 / (100.0 * std::sqrt(double(n)) * tiny);
  TriLU lu;
  std::vector<double> x(n);
  uint64_t seed = 0x5eed + n;
  auto uniform = [&]() {
    seed += 0x9E3779B97F4A7C15ull;
    uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double(z >> 11) + 0.5) * 0x1.0p-52 - 1.0;
  };
  size_t c0 = 0;
  double prev = 0.0;
  for (size_t j = 0; j < k; ++j) {
    double lambda = t.w[lo + j];
    if (j > 0 && t.w[lo + j - 1] - lambda > cluster_gap) c0 = j;
    // Equal eigenvalues get distinct shifts (a few eps |T| apart), as in LAPACK's dstein.
    if (j > c0 && prev - lambda < 10.0 * tiny) lambda = prev - 10.0 * tiny;
    prev = lambda;
    lu.factor(n, t.d.data(), t.e.data(), lambda, tiny);
    double nx = 0.0;
    for (size_t i = 0; i < n; ++i) {
      x[i] = uniform();
      nx += x[i] * x[i];
    }
    nx = 1.0 / std::sqrt(nx);
    for (double& v : x) v *= nx;
    double* z = vecs.data() + j * n;
    int good = 0;
    for (int it = 0; it < 6 && good < 2; ++it) {
      lu.solve(n, x.data());
      LK().reorth(vecs.data(), n, c0, j, x.data());
      double g = 0.0;
      for (double v : x) g += v * v;
      g = std::sqrt(g);
      if (!(g > 0.0) || !std::isfinite(g)) {
        // Everything was in the cluster's span already: restart from another vector.
        for (size_t i = 0; i < n; ++i) x[i] = uniform();
        LK().reorth(vecs.data(), n, c0, j, x.data());
        g = 0.0;
        for (double v : x) g += v * v;
        g = std::sqrt(g);
        for (double& v : x) v /= g;
        continue;
      }
      for (double& v : x) v /= g;
      if (g >= growth_ok) ++good;
    }
    std::copy(x.begin(), x.end(), z);
  }
  back_transform(t, vecs.data(), k);
}

void complement_basis(size_t g, size_t p, const double* D, std::vector<double>& Q) {
  const size_t c = g - p;
  Q.assign(g * c, 0.0);
  for (size_t i = 0; i < c; ++i) Q[(p + i) * c + i] = 1.0;
  if (p == 0 || c == 0) return;
  // Householder QR of M = D (g x p): unit reflectors v_j (column j of V, rows j..g-1), H_j = I - 2 v_j v_j^T.
  std::vector<double> M(g * p), V(g * p, 0.0), wv(p);
  std::copy(D, D + g * p, M.begin());
  for (size_t j = 0; j < p; ++j) {
    double norm2 = 0;
    for (size_t i = j; i < g; ++i) norm2 += M[i * p + j] * M[i * p + j];
    const double norm = std::sqrt(norm2);
    if (norm == 0.0) continue;
    const double alpha = M[j * p + j] > 0 ? -norm : norm;
    double vv = 0;
    for (size_t i = j; i < g; ++i) {
      double v = M[i * p + j] - (i == j ? alpha : 0.0);
      V[i * p + j] = v;
      vv += v * v;
    }
    if (vv == 0.0) continue;
    const double sc = 1.0 / std::sqrt(vv);
    for (size_t i = j; i < g; ++i) V[i * p + j] *= sc;
    std::fill(wv.begin(), wv.end(), 0.0);
    for (size_t i = j; i < g; ++i) {
      const double vi = V[i * p + j];
      for (size_t cc = j; cc < p; ++cc) wv[cc] += vi * M[i * p + cc];
    }
    for (size_t i = j; i < g; ++i) {
      const double vi = 2.0 * V[i * p + j];
      for (size_t cc = j; cc < p; ++cc) M[i * p + cc] -= vi * wv[cc];
    }
  }
  // Q = H_0 H_1 ... H_{p-1} [0; I]: blocks of reflectors in compact WY form, H_b0 ... H_b1-1 =
  // I - Vb T Vb^T (T upper triangular), the last block first; block b touches rows b0.. only.
  const size_t nb = 32;
  std::vector<double> T, S, Y;
  for (size_t b1 = p; b1 > 0;) {
    const size_t b0 = b1 > nb ? b1 - nb : 0, bs = b1 - b0, rows = g - b0;
    const double* Vb = V.data() + b0 * p + b0;
    S.assign(bs * bs, 0.0);
    gemm<double, double, double>(bs, bs, rows, Vb, 1, p, Vb, p, 1, S.data(), bs, false);
    T.assign(bs * bs, 0.0);
    for (size_t j = 0; j < bs; ++j) {
      T[j * bs + j] = 2.0;
      // T[0:j, j] = -2 T[0:j, 0:j] S[0:j, j]
      for (size_t i = 0; i < j; ++i) {
        double s = 0;
        for (size_t l = i; l < j; ++l) s += T[i * bs + l] * S[l * bs + j];
        T[i * bs + j] = -2.0 * s;
      }
    }
    // Q[b0:, :] -= Vb (T (Vb^T Q[b0:, :]))
    Y.assign(bs * c, 0.0);
    gemm<double, double, double>(bs, c, rows, Vb, 1, p, Q.data() + b0 * c, c, 1, Y.data(), c, false);
    std::vector<double> Y2(bs * c, 0.0);
    for (size_t i = 0; i < bs; ++i) T[i * bs + i] = -T[i * bs + i];
    for (size_t i = 0; i < bs; ++i)
      for (size_t j = i + 1; j < bs; ++j) T[i * bs + j] = -T[i * bs + j];
    gemm<double, double, double>(bs, c, bs, T.data(), bs, 1, Y.data(), c, 1, Y2.data(), c, false);
    gemm<double, double, double>(rows, c, bs, Vb, p, 1, Y2.data(), c, 1, Q.data() + b0 * c, c, true);
    b1 = b0;
  }
}

}  // namespace svc
