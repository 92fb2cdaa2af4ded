"""ML-DSA-65 signature verification (FIPS 204, August 2024), standard library only.

Only verification is here: the offline verifiers never sign. Every decoding step keeps the
range checks of the standard, and any malformed input gives False, never an exception.
"""

from __future__ import annotations

import hashlib

Q = 8380417
N = 256
D = 13
TAU = 49
LAMBDA = 192
GAMMA1 = 1 << 19
GAMMA2 = (Q - 1) // 32
K = 6
L = 5
ETA = 4
BETA = TAU * ETA
OMEGA = 55
CTILDE_BYTES = LAMBDA // 4

PUBLIC_KEY_BYTES = 32 + K * 320
SIGNATURE_BYTES = CTILDE_BYTES + L * 640 + OMEGA + K

_INV_N = pow(256, Q - 2, Q)  # 8347681


def _brv8(x: int) -> int:
    return int(f"{x:08b}"[::-1], 2)


# zeta^brv(m) for m = 0..255, zeta = 1753 the 512th root of unity mod q
ZETAS = [pow(1753, _brv8(m), Q) for m in range(256)]


def ntt(w: list[int]) -> list[int]:
    a = list(w)
    m = 0
    length = 128
    while length >= 1:
        start = 0
        while start < 256:
            m += 1
            z = ZETAS[m]
            for j in range(start, start + length):
                t = z * a[j + length] % Q
                a[j + length] = (a[j] - t) % Q
                a[j] = (a[j] + t) % Q
            start += 2 * length
        length //= 2
    return a


def ntt_inv(w: list[int]) -> list[int]:
    a = list(w)
    m = 256
    length = 1
    while length < 256:
        start = 0
        while start < 256:
            m -= 1
            z = Q - ZETAS[m]
            for j in range(start, start + length):
                t = a[j]
                u = a[j + length]
                a[j] = (t + u) % Q
                a[j + length] = z * (t - u) % Q
            start += 2 * length
        length *= 2
    return [x * _INV_N % Q for x in a]


def _shake128(data: bytes, n: int) -> bytes:
    return hashlib.shake_128(data).digest(n)


def _shake256(data: bytes, n: int) -> bytes:
    return hashlib.shake_256(data).digest(n)


def rej_ntt_poly(seed: bytes) -> list[int]:
    """Algorithm 30: uniform coefficients mod q from SHAKE128(seed), three bytes each."""
    out: list[int] = []
    blocks = 5
    pos = 0
    stream = _shake128(seed, 168 * blocks)
    while len(out) < N:
        if pos + 3 > len(stream):
            # hashlib has no incremental squeeze: a longer digest has the same prefix
            blocks *= 2
            stream = _shake128(seed, 168 * blocks)
            continue
        v = stream[pos] | (stream[pos + 1] << 8) | ((stream[pos + 2] & 0x7F) << 16)
        pos += 3
        if v < Q:
            out.append(v)
    return out


def expand_a(rho: bytes) -> list[list[list[int]]]:
    """Algorithm 32: the k x l matrix in NTT form, A[r][s] from rho || s || r."""
    return [[rej_ntt_poly(rho + bytes([s, r])) for s in range(L)] for r in range(K)]


def sample_in_ball(ctilde: bytes) -> list[int]:
    """Algorithm 29: the challenge with TAU coefficients +-1, from all of c~ (final FIPS 204)."""
    n = 136 * 2
    stream = _shake256(ctilde, n)
    signs = int.from_bytes(stream[:8], "little")
    pos = 8
    c = [0] * N
    for i in range(N - TAU, N):
        while True:
            if pos >= len(stream):
                n *= 2
                stream = _shake256(ctilde, n)
            j = stream[pos]
            pos += 1
            if j <= i:
                break
        c[i] = c[j]
        c[j] = 1 - 2 * ((signs >> (i + TAU - N)) & 1)
    return c


def _unpack(data: bytes, bits: int) -> list[int]:
    """256 unsigned `bits`-bit values, little-endian bit order (SimpleBitUnpack)."""
    v = int.from_bytes(data, "little")
    mask = (1 << bits) - 1
    return [(v >> (bits * i)) & mask for i in range(N)]


def pk_decode(pk: bytes) -> tuple[bytes, list[list[int]]]:
    rho = pk[:32]
    t1 = [_unpack(pk[32 + 320 * i: 32 + 320 * (i + 1)], 10) for i in range(K)]
    return rho, t1


def hint_bit_unpack(y: bytes) -> list[list[int]] | None:
    """Algorithm 21 with its checks: indexes strictly increasing per row, counts in range,
    unused slots zero. None for a malformed hint."""
    h = [[0] * N for _ in range(K)]
    index = 0
    for i in range(K):
        end = y[OMEGA + i]
        if end < index or end > OMEGA:
            return None
        first = index
        while index < end:
            if index > first and y[index - 1] >= y[index]:
                return None
            h[i][y[index]] = 1
            index += 1
    for i in range(index, OMEGA):
        if y[i] != 0:
            return None
    return h


def sig_decode(sig: bytes) -> tuple[bytes, list[list[int]], list[list[int]] | None]:
    ctilde = sig[:CTILDE_BYTES]
    z = []
    off = CTILDE_BYTES
    for _ in range(L):
        z.append([GAMMA1 - v for v in _unpack(sig[off: off + 640], 20)])
        off += 640
    return ctilde, z, hint_bit_unpack(sig[off:])


def _decompose(r: int) -> tuple[int, int]:
    """Algorithm 36 with gamma2 = (q - 1) / 32."""
    rp = r % Q
    r0 = rp % (2 * GAMMA2)
    if r0 > GAMMA2:
        r0 -= 2 * GAMMA2
    if rp - r0 == Q - 1:
        return 0, r0 - 1
    return (rp - r0) // (2 * GAMMA2), r0


def _use_hint(h: int, r: int) -> int:
    m = (Q - 1) // (2 * GAMMA2)
    r1, r0 = _decompose(r)
    if h == 1:
        return (r1 + 1) % m if r0 > 0 else (r1 - 1) % m
    return r1


def _w1_encode(w1: list[list[int]]) -> bytes:
    out = bytearray()
    for poly in w1:
        for j in range(0, N, 2):
            out.append(poly[j] | (poly[j + 1] << 4))
    return bytes(out)


def verify_internal(pk: bytes, m_prime: bytes, sig: bytes) -> bool:
    """Algorithm 8, ML-DSA.Verify_internal."""
    if len(pk) != PUBLIC_KEY_BYTES or len(sig) != SIGNATURE_BYTES:
        return False
    rho, t1 = pk_decode(pk)
    ctilde, z, h = sig_decode(sig)
    if h is None:
        return False
    bound = GAMMA1 - BETA
    for poly in z:
        for c in poly:
            if c >= bound or c <= -bound:
                return False
    a_hat = expand_a(rho)
    tr = _shake256(pk, 64)
    mu = _shake256(tr + m_prime, 64)
    c_hat = ntt([x % Q for x in sample_in_ball(ctilde)])
    z_hat = [ntt([x % Q for x in poly]) for poly in z]
    w1 = []
    for r in range(K):
        t1_hat = ntt([(x << D) % Q for x in t1[r]])
        acc = [0] * N
        for s in range(L):
            a = a_hat[r][s]
            zs = z_hat[s]
            for j in range(N):
                acc[j] += a[j] * zs[j]
        w = ntt_inv([(acc[j] - c_hat[j] * t1_hat[j]) % Q for j in range(N)])
        hr = h[r]
        w1.append([_use_hint(hr[j], w[j]) for j in range(N)])
    return _shake256(mu + _w1_encode(w1), CTILDE_BYTES) == ctilde


def verify(pk: bytes, message: bytes, sig: bytes, ctx: bytes = b"") -> bool:
    """Algorithm 3, ML-DSA.Verify (pure): M' = 0 || len(ctx) || ctx || M. False for any
    malformed key, signature or context, never an exception."""
    try:
        pk, message, sig, ctx = bytes(pk), bytes(message), bytes(sig), bytes(ctx)
        if len(ctx) > 255:
            return False
        return verify_internal(pk, bytes([0, len(ctx)]) + ctx + message, sig)
    except Exception:  # noqa: BLE001 - a verifier fails closed on anything unexpected
        return False
