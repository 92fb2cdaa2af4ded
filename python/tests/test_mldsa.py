"""ML-DSA-65 verification against the NIST ACVP vectors in test/fixtures/mldsa65, and
malformed keys and signatures, which must give False and never raise."""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import unittest

from svc_tensor import mldsa

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "test", "fixtures", "mldsa65")


def _load(kind: str, name: str) -> dict:
    with open(os.path.join(FIXTURES, f"ML-DSA-{kind}-FIPS204", name), encoding="utf-8") as f:
        return json.load(f)


def public_key_from_secret(sk: bytes) -> bytes:
    """pk = rho || t1 with t = NTT^-1(A * NTT(s1)) + s2 and t1 = t >> 13 (Power2Round)."""
    rho, tr = sk[:32], sk[64:128]
    off = 128

    def eta_poly(b: bytes) -> list[int]:
        v = int.from_bytes(b, "little")
        return [(mldsa.ETA - ((v >> (4 * i)) & 15)) % mldsa.Q for i in range(256)]

    s1 = [eta_poly(sk[off + 128 * i: off + 128 * (i + 1)]) for i in range(mldsa.L)]
    off += 128 * mldsa.L
    s2 = [eta_poly(sk[off + 128 * i: off + 128 * (i + 1)]) for i in range(mldsa.K)]
    a = mldsa.expand_a(rho)
    s1_hat = [mldsa.ntt(p) for p in s1]
    out = bytearray(rho)
    for r in range(mldsa.K):
        acc = [0] * 256
        for s in range(mldsa.L):
            for j in range(256):
                acc[j] += a[r][s][j] * s1_hat[s][j]
        t = mldsa.ntt_inv([x % mldsa.Q for x in acc])
        t1 = [((t[j] + s2[r][j]) % mldsa.Q + (1 << 12) - 1) >> 13 for j in range(256)]
        v = 0
        for j, c in enumerate(t1):
            v |= c << (10 * j)
        out += v.to_bytes(320, "little")
    pk = bytes(out)
    assert hashlib.shake_256(pk).digest(64) == tr, "the derived public key does not match tr in the secret key"
    return pk


class SigVerVectors(unittest.TestCase):
    def test_every_sigver_vector_gives_its_expected_verdict(self) -> None:
        prompt = _load("sigVer", "prompt.json")
        expected = {t["tcId"]: t["testPassed"] for g in _load("sigVer", "expectedResults.json")["testGroups"] for t in g["tests"]}
        n = 0
        for g in prompt["testGroups"]:
            self.assertEqual(g["parameterSet"], "ML-DSA-65")
            for t in g["tests"]:
                with self.subTest(tcId=t["tcId"]):
                    got = mldsa.verify(bytes.fromhex(t["pk"]), bytes.fromhex(t["message"]), bytes.fromhex(t["signature"]), bytes.fromhex(t["context"]))
                    self.assertIs(got, expected[t["tcId"]])
                    n += 1
        self.assertEqual(n, 11)
        self.assertEqual(sum(expected.values()), 3, "three of the vectors are valid signatures")


class SigGenVectors(unittest.TestCase):
    def test_siggen_signatures_verify_with_the_public_key_derived_from_sk(self) -> None:
        prompt = _load("sigGen", "prompt.json")
        sigs = {t["tcId"]: t["signature"] for g in _load("sigGen", "expectedResults.json")["testGroups"] for t in g["tests"]}
        n = 0
        for g in prompt["testGroups"]:
            for t in g["tests"]:
                with self.subTest(tcId=t["tcId"]):
                    pk = public_key_from_secret(bytes.fromhex(t["sk"]))
                    msg = bytes.fromhex(t["message"])
                    sig = bytes.fromhex(sigs[t["tcId"]])
                    self.assertEqual(t["context"], "")
                    self.assertTrue(mldsa.verify(pk, msg, sig))
                    self.assertFalse(mldsa.verify(pk, msg + b"\x00", sig), "another message")
                    self.assertFalse(mldsa.verify(pk, msg, sig, b"ctx"), "another context")
                    n += 1
        self.assertEqual(n, 2)

    def test_keygen_vectors_public_keys_match_their_secret_keys(self) -> None:
        expected = _load("keyGen", "expectedResults.json")
        for g in expected["testGroups"]:
            for t in g["tests"][:2]:
                with self.subTest(tcId=t["tcId"]):
                    self.assertEqual(public_key_from_secret(bytes.fromhex(t["sk"])).hex().upper(), t["pk"].upper())


class Malformed(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        prompt = _load("sigVer", "prompt.json")
        expected = {t["tcId"]: t["testPassed"] for g in _load("sigVer", "expectedResults.json")["testGroups"] for t in g["tests"]}
        t = next(t for g in prompt["testGroups"] for t in g["tests"] if expected[t["tcId"]])
        cls.pk = bytes.fromhex(t["pk"])
        cls.msg = bytes.fromhex(t["message"])
        cls.sig = bytes.fromhex(t["signature"])
        cls.ctx = bytes.fromhex(t["context"])

    def check_false(self, pk: object, msg: object, sig: object, ctx: object = None) -> None:
        got = mldsa.verify(pk, msg, sig, self.ctx if ctx is None else ctx)  # type: ignore[arg-type]
        self.assertIs(got, False)

    def test_the_genuine_signature_verifies(self) -> None:
        self.assertTrue(mldsa.verify(self.pk, self.msg, self.sig, self.ctx))

    def test_wrong_lengths_and_types(self) -> None:
        for sig in (b"", self.sig[:-1], self.sig + b"\x00", b"\x00" * 4096):
            self.check_false(self.pk, self.msg, sig)
        for pk in (b"", self.pk[:-1], self.pk + b"\x00"):
            self.check_false(pk, self.msg, self.sig)
        for bad in (None, 12, "text", [1, 2], object()):
            self.check_false(bad, self.msg, self.sig)
            self.check_false(self.pk, bad, self.sig)
            self.check_false(self.pk, self.msg, bad)
        self.check_false(self.pk, self.msg, self.sig, b"x" * 256)

    def test_every_flipped_byte_region_is_rejected(self) -> None:
        rng = random.Random(7)
        positions = [0, 47, 48, 100, 3247, 3248, 3250, 3302, 3303, 3308] + [rng.randrange(len(self.sig)) for _ in range(20)]
        for pos in positions:
            with self.subTest(pos=pos):
                bad = bytearray(self.sig)
                bad[pos] ^= 0x01
                self.check_false(self.pk, self.msg, bytes(bad))
        bad_pk = bytearray(self.pk)
        bad_pk[40] ^= 0x80
        self.check_false(bytes(bad_pk), self.msg, self.sig)

    def test_hint_encodings_outside_the_standard_are_rejected(self) -> None:
        hint_at = mldsa.CTILDE_BYTES + mldsa.L * 640
        base = bytearray(self.sig)
        cases = {}
        c = bytearray(base)
        c[hint_at + mldsa.OMEGA] = mldsa.OMEGA + 1  # a row's count past omega
        cases["count past omega"] = c
        c = bytearray(base)
        c[hint_at + mldsa.OMEGA + 1] = 0  # counts not increasing
        c[hint_at + mldsa.OMEGA] = max(1, c[hint_at + mldsa.OMEGA])
        cases["decreasing counts"] = c
        c = bytearray(base)
        last = c[hint_at + mldsa.OMEGA + mldsa.K - 1]
        if last < mldsa.OMEGA:
            c[hint_at + mldsa.OMEGA - 1] = 1  # a nonzero unused slot
            cases["nonzero padding"] = c
        c = bytearray(base)
        if c[hint_at + mldsa.OMEGA] >= 2:
            c[hint_at + 1] = c[hint_at]  # indexes not strictly increasing
            cases["repeated index"] = c
        self.assertGreaterEqual(len(cases), 3)
        for name, sig in cases.items():
            with self.subTest(case=name):
                self.assertIsNone(mldsa.hint_bit_unpack(bytes(sig[hint_at:])))
                self.check_false(self.pk, self.msg, bytes(sig))

    def test_z_past_the_norm_bound_is_rejected(self) -> None:
        # the first coefficient of z encoded as gamma1 - (gamma1 - beta): |z| = gamma1 - beta
        bad = bytearray(self.sig)
        v = int.from_bytes(bad[48:48 + 640], "little")
        v = (v & ~0xFFFFF) | (mldsa.BETA & 0xFFFFF)
        bad[48:48 + 640] = v.to_bytes(640, "little")
        self.check_false(self.pk, self.msg, bytes(bad))

    def test_random_signatures_never_raise(self) -> None:
        rng = random.Random(11)
        for _ in range(40):
            sig = bytes(rng.randrange(256) for _ in range(mldsa.SIGNATURE_BYTES))
            self.check_false(self.pk, self.msg, sig)


if __name__ == "__main__":
    sys.exit(unittest.main())
