// A plain TT-SVD in float64 for the tests to compare the engine with: one-sided Jacobi SVD of
// each remainder's unfolding and the δ-rule of Oseledets' TT-SVD.

/** Rotates row pair (a, b) of `M` (rows of length `len`) by (c, s). */
function rotateRows(M: Float64Array, len: number, a: number, b: number, c: number, s: number): void {
  const oa = a * len,
    ob = b * len;
  for (let i = 0; i < len; i++) {
    const x = M[oa + i]!,
      y = M[ob + i]!;
    M[oa + i] = c * x - s * y;
    M[ob + i] = s * x + c * y;
  }
}

/**
 * One-sided Jacobi on the p rows (of length q) of M, in float64, until they are mutually
 * orthogonal (at most 60 sweeps); J (p x p), when given, receives the same rotations.
 */
function orthogonalizeRows(M: Float64Array, p: number, q: number, J?: Float64Array): void {
  for (let sweep = 0; sweep < 60; sweep++) {
    let rotated = false;
    for (let a = 0; a + 1 < p; a++)
      for (let b = a + 1; b < p; b++) {
        let al = 0,
          be = 0,
          ga = 0;
        const oa = a * q,
          ob = b * q;
        for (let i = 0; i < q; i++) {
          const x = M[oa + i]!,
            y = M[ob + i]!;
          al += x * x;
          be += y * y;
          ga += x * y;
        }
        if (ga === 0 || Math.abs(ga) <= 1e-15 * Math.sqrt(al * be)) continue;
        rotated = true;
        const zeta = (be - al) / (2 * ga);
        const t = Math.sign(zeta || 1) / (Math.abs(zeta) + Math.sqrt(1 + zeta * zeta));
        const c = 1 / Math.sqrt(1 + t * t),
          s = c * t;
        rotateRows(M, q, a, b, c, s);
        if (J) rotateRows(J, p, a, b, c, s);
      }
    if (!rotated) break;
  }
}

/** Singular values (descending) of the m x N row-major matrix by one-sided Jacobi (float64). */
export function singularValues(A: Float64Array, m: number, N: number): { s: number[]; rows: Float64Array } {
  // Rotate the shorter side: work on the rows of A when m <= N, else on the columns (transpose).
  const wide = m <= N;
  const p = wide ? m : N,
    q = wide ? N : m;
  const V = new Float64Array(p * q);
  for (let i = 0; i < m; i++)
    for (let j = 0; j < N; j++) {
      if (wide) V[i * q + j] = A[i * N + j]!;
      else V[j * q + i] = A[i * N + j]!;
    }
  orthogonalizeRows(V, p, q);
  const s: number[] = [];
  for (let a = 0; a < p; a++) {
    let x = 0;
    for (let i = 0; i < q; i++) x += V[a * q + i]! ** 2;
    s.push(Math.sqrt(x));
  }
  return { s: s.sort((x, y) => y - x), rows: V };
}

/**
 * Ranks of a plain TT-SVD over `modes`: at each step the smallest rank whose discarded energy is
 * ≤ δ² = tol²‖A‖²/(d−1), the remainder being the data projected on the kept left singular
 * subspace (its singular values are those kept, with the same right vectors, so the next
 * unfolding is formed from the kept singular triplets).
 */
export function ttsvdRanks(x: Float64Array, modes: number[], tol: number): number[] {
  const d = modes.length;
  let norm2 = 0;
  for (const v of x) norm2 += v * v;
  const delta2 = (tol * tol * norm2) / (d - 1);
  const ranks = [1];
  let cur = x,
    rprev = 1,
    rest = x.length;
  for (let k = 0; k + 1 < d; k++) {
    const m = rprev * modes[k]!,
      N = rest / modes[k]!;
    const { s } = singularValues(cur, m, N);
    let r = s.length,
      tail = 0;
    while (r > 1 && tail + s[r - 1]! ** 2 <= delta2) {
      tail += s[r - 1]! ** 2;
      r--;
    }
    ranks.push(r);
    cur = remainder(cur, m, N, r);
    rprev = r;
    rest = N;
  }
  ranks.push(1);
  return ranks;
}

/** U_r^T A (r x N) for the m x N matrix A, by one-sided Jacobi in float64. */
function remainder(A: Float64Array, m: number, N: number, r: number): Float64Array {
  // Rows of A rotated by Jacobi: W = J^T A with orthogonal J, rows of W mutually orthogonal, so
  // W's rows sorted by norm are sigma_i v_i^T: exactly U^T A.
  if (m <= N) {
    const { rows } = singularValues(A, m, N);
    const order = Array.from({ length: m }, (_, i) => i);
    const nrm = order.map((i) => {
      let s = 0;
      for (let j = 0; j < N; j++) s += rows[i * N + j]! ** 2;
      return s;
    });
    order.sort((a, b) => nrm[b]! - nrm[a]!);
    const out = new Float64Array(r * N);
    for (let t = 0; t < r; t++) out.set(rows.subarray(order[t]! * N, order[t]! * N + N), t * N);
    return out;
  }
  // m > N: Jacobi on the rows of A^T (N rows of length m), accumulating the N x N rotation J:
  // J A^T = S U^T, so A = U S J and U^T A = S J (rows sigma_a v_a^T, v_a^T the rows of J).
  const At = new Float64Array(N * m);
  for (let i = 0; i < m; i++) for (let j = 0; j < N; j++) At[j * m + i] = A[i * N + j]!;
  // Rotate rows of A^T (N rows of length m) while accumulating the N x N rotation J.
  const J = new Float64Array(N * N);
  for (let i = 0; i < N; i++) J[i * N + i] = 1;
  orthogonalizeRows(At, N, m, J);
  // Row a of At is sigma_a u_a^T and row a of J is v_a^T: U^T A = S V^T, rows sigma_a v_a^T.
  const nrm = Array.from({ length: N }, (_, a) => {
    let s = 0;
    for (let i = 0; i < m; i++) s += At[a * m + i]! ** 2;
    return Math.sqrt(s);
  });
  const order = Array.from({ length: N }, (_, i) => i).sort((a, b) => nrm[b]! - nrm[a]!);
  const out = new Float64Array(r * N);
  for (let t = 0; t < r; t++) for (let j = 0; j < N; j++) out[t * N + j] = nrm[order[t]!]! * J[order[t]! * N + j]!;
  return out;
}
