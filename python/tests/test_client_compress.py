"""The client's local TT compression of a large float put (svc_tensor.ttsvd, Client.put):
the TT-SVD's rules and memory on their own, the put_cores wire format against a local server
that records what it receives, and puts past the upload limit of a real gateway and engine
(SVC_TEST_GATEWAY_URL, SVC_TEST_API_KEY, SVC_TEST_MAX_UPLOAD_BYTES, started by
test/python/client-compress.test.ts with a limit of 256 KiB)."""

from __future__ import annotations

import base64
import http.server
import json
import math
import os
import re
import sys
import threading
import tracemalloc
import unittest
import urllib.parse
from unittest import mock

import numpy as np

from svc_tensor import Client, SvcError, ttsvd

URL = os.environ.get("SVC_TEST_GATEWAY_URL")
KEY = os.environ.get("SVC_TEST_API_KEY")
LIMIT = int(os.environ.get("SVC_TEST_MAX_UPLOAD_BYTES") or 0)
NS = "py"
PUT_ANSWER_FIELDS = {"namespace", "key", "version", "verdict", "compressed", "compression_ratio", "relative_error", "max_abs_error",
                     "dtype", "shape", "tt", "bytes_in", "bytes_stored", "fingerprint"}


def field(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    """A smooth field (a few separable waves): what TT compresses well."""
    grids = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in shape], indexing="ij")
    x = np.ones(shape)
    for i, g in enumerate(grids):
        x = x + np.sin(g / (9 + 4 * i)) * (0.5 ** i)
    if len(shape) >= 2:
        x = x + 0.5 * np.sin((grids[-1] + grids[-2]) / 17)
    return x.astype(dtype)


def errors(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Relative Frobenius error and largest element error of y against x, in float64."""
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    return float(np.linalg.norm(y64 - x64) / np.linalg.norm(x64)), float(np.max(np.abs(y64 - x64)))


def lowrank(rng: np.random.Generator, rows: int, cols: int, rank: int) -> np.ndarray:
    """A rows x cols float64 matrix of rank `rank` (a product of Gaussian factors)."""
    return rng.standard_normal((rows, rank)) @ rng.standard_normal((rank, cols))


class TTSVD(unittest.TestCase):
    """svc_tensor.ttsvd on its own: the engine's modes, truncation and acceptance rules."""

    def test_modes_are_the_engines(self) -> None:
        # lib/tt.ts chooseModes: dimensions of 64 or more in factors of at most 8, balanced, largest first
        cases = {(256, 256, 256): [8, 8, 4, 8, 8, 4, 8, 8, 4], (1024,): [8, 8, 4, 4], (1000,): [8, 5, 5, 5], (97,): [97],
                 (63, 64): [63, 8, 8], (1, 4096): [1, 8, 8, 8, 8], (4096, 1, 3): [8, 8, 8, 8, 1, 3], (2 * 131,): [131, 2],
                 (30030,): [13, 11, 7, 6, 5], (720,): [6, 6, 5, 4], (65536 * 7,): [8, 8, 8, 8, 7, 4, 4]}
        for shape, modes in cases.items():
            with self.subTest(shape=shape):
                self.assertEqual(ttsvd.choose_modes(shape), modes)

    def test_the_truncation_rule_of_tt_svd(self) -> None:
        # a 40 x 48 matrix (two modes, one step) of known singular values: the rank is the smallest
        # whose discarded energy is at most tol_t^2 * ||x||^2 / (d - 1), tol_t a hair below tol
        rng = np.random.default_rng(3)
        s = np.array([10.0, 5, 2, 1, 0.1, 0.05, 0.01, 1e-3, 1e-4, 1e-5])
        U = np.linalg.qr(rng.standard_normal((40, 10)))[0]
        V = np.linalg.qr(rng.standard_normal((48, 10)))[0]
        x = (U * s) @ V.T
        norm = float(np.linalg.norm(s))
        for dtype in ("float64", "float32"):
            for keep in (3, 4, 5, 7):
                tail = float(np.sqrt(np.sum(s[keep:] ** 2)))
                # a tolerance 5% above what rank keep discards keeps it, 5% below one more
                for tol, rank in ((1.05 * tail / norm, keep), (0.95 * tail / norm, keep + 1)):
                    with self.subTest(dtype=dtype, keep=keep, tol=tol):
                        t = ttsvd.compress_locally(x.astype(dtype), tolerance=tol)
                        assert t is not None
                        self.assertEqual((t.modes, t.ranks), ([40, 48], [1, rank, 1]))
                        want = float(np.sqrt(np.sum(s[rank:] ** 2))) / norm
                        self.assertAlmostEqual(t.relative_error, want, delta=1e-6 * want + (1e-6 if dtype == "float32" else 0))
                        self.assertEqual(t.verdict, "compressed")
                        self.assertTrue(all(c.dtype == np.dtype(dtype) for c in t.cores))

    def test_each_step_gets_its_share_of_the_budget(self) -> None:
        # x = sum_k s_k u_k (x) p_k (x) q_k (orthonormal u, p, q): both unfoldings of the 20 x 30 x 40
        # tensor have singular values s. Each of the d - 1 = 2 steps may discard tol_t^2 ||x||^2 / 2:
        # rank 4 here, where a step given the whole budget would keep 3
        rng = np.random.default_rng(6)
        s = np.array([1.0, 0.5, 0.25, 0.1, 0.01, 0.001])
        u, p, q = (np.linalg.qr(rng.standard_normal((n, len(s))))[0] for n in (20, 30, 40))
        x = np.einsum("k,ik,jk,lk->ijl", s, u, p, q)
        norm2 = float(np.sum(s * s))
        tol = math.sqrt(1.5 * float(np.sum(s[3:] ** 2)) / norm2)
        for dtype in ("float64", "float32"):
            with self.subTest(dtype=dtype):
                t = ttsvd.compress_locally(x.astype(dtype), tolerance=tol)
                assert t is not None
                self.assertEqual((t.modes, t.ranks), ([20, 30, 40], [1, 4, 4, 1]))
                self.assertAlmostEqual(t.relative_error, math.sqrt(float(np.sum(s[4:] ** 2)) / norm2), delta=1e-6)

    def test_results_above_the_tolerance_need_the_callers_max_rank(self) -> None:
        # data of rank 8 under a default max_rank of 4 (patched down from 256): no TT within the
        # tolerance, proven by sampled blocks before any sweep; the caller's own max_rank 4 gets
        # the weak TT
        rng = np.random.default_rng(12)
        x = (lowrank(rng, 128, 512, 8).reshape(128, 16, 32) + 1e-3 * rng.standard_normal((128, 16, 32))).astype(np.float32)
        with mock.patch.object(ttsvd, "LOCAL_DEFAULT_MAX_RANK", 4), mock.patch.object(ttsvd, "_sweep", wraps=ttsvd._sweep) as sweep:
            self.assertIsNone(ttsvd.compress_locally(x, tolerance=1e-2))
            self.assertEqual(sweep.call_count, 0, "proven above the tolerance: no sweep")
            with mock.patch.object(ttsvd, "_probe", return_value=None):
                self.assertIsNone(ttsvd.compress_locally(x, tolerance=1e-2), "swept, measured above the tolerance, refused")
            self.assertGreater(sweep.call_count, 0)
            weak = ttsvd.compress_locally(x, tolerance=1e-2, max_rank=4)
        assert weak is not None
        self.assertEqual((weak.verdict, max(weak.ranks)), ("weak", 4))
        self.assertGreater(weak.relative_error, 1e-2)

    def test_the_plain_shape_where_max_rank_binds_the_split_modes(self) -> None:
        # a 64 x 512 matrix of rank 24: its split modes (8, 8, 8, 8, 8) need rank 64 where the
        # plain ones need 24; under a max_rank of 40 (the default, patched) the split modes are
        # proven above the tolerance without a sweep and the plain shape meets it
        x = lowrank(np.random.default_rng(13), 64, 512, 24).astype(np.float32)
        with mock.patch.object(ttsvd, "LOCAL_DEFAULT_MAX_RANK", 40), mock.patch.object(ttsvd, "_sweep", wraps=ttsvd._sweep) as sweep:
            t = ttsvd.compress_locally(x)
        assert t is not None
        self.assertEqual((t.modes, t.ranks, t.verdict), ([64, 512], [1, 24, 1], "compressed"))
        self.assertEqual([c.args[1] for c in sweep.call_args_list], [[64, 512]], "only the plain shape was swept")
        self.assertLessEqual(t.relative_error, 1e-3)
        # the caller's own max_rank 40: the split modes are swept (weak), then the plain shape wins
        t = ttsvd.compress_locally(x, max_rank=40)
        assert t is not None
        self.assertEqual((t.modes, t.ranks, t.verdict), ([64, 512], [1, 24, 1], "compressed"))

    def test_the_minimum_ratio(self) -> None:
        # rank 150 of 512 x 512 in float64: cores 1.62 times smaller than the data
        x = lowrank(np.random.default_rng(8), 512, 512, 150)
        t = ttsvd.compress_locally(x, min_ratio=1.6)
        assert t is not None
        self.assertEqual(t.ranks, [1, 8, 64, 150, 64, 8, 1])
        self.assertAlmostEqual(x.nbytes / t.nbytes, 1.619, places=3)
        for low in (1.7, 2.0):
            with mock.patch.object(ttsvd, "_probe", return_value=None):
                self.assertIsNone(ttsvd.compress_locally(x, min_ratio=low), "the sweep gives up")
            self.assertIsNone(ttsvd.compress_locally(x, min_ratio=low))

    def test_decoded_values_and_reported_errors_agree(self) -> None:
        for dtype in ("float32", "float64"):
            for shape in ((64, 64, 32), (65536,), (1, 64, 1, 256), (97, 89, 3)):
                with self.subTest(dtype=dtype, shape=shape):
                    x = field(shape, dtype)
                    t = ttsvd.compress_locally(x, tolerance=1e-4)
                    assert t is not None
                    y = ttsvd.reconstruct(t.cores, shape, x.dtype)
                    self.assertEqual(y.dtype, x.dtype)
                    rel, mx = errors(x, y)
                    self.assertLessEqual(t.relative_error, 1e-4)
                    self.assertAlmostEqual(rel, t.relative_error, delta=1e-9 + 1e-6 * rel)
                    self.assertAlmostEqual(mx, t.max_abs_error, delta=1e-12 + 1e-6 * mx)
                    self.assertGreaterEqual(x.nbytes / t.nbytes, ttsvd.LOCAL_MIN_RATIO)
                    self.assertEqual(math.prod(t.modes), x.size)
                    self.assertEqual([c.shape for c in t.cores], [(t.ranks[k], t.modes[k], t.ranks[k + 1]) for k in range(len(t.modes))])

    def test_max_abs_error_bounds_every_element(self) -> None:
        x = field((64, 64, 32), "float64")
        for bound in (1e-3, 1e-5, 1e-8):
            with self.subTest(bound=bound):
                t = ttsvd.compress_locally(x, max_abs_error=bound)
                assert t is not None
                _, mx = errors(x, ttsvd.reconstruct(t.cores, x.shape, x.dtype))
                self.assertLessEqual(mx, bound)
                self.assertLessEqual(t.max_abs_error, bound)
        # below what float32 carries: no TT (the put goes as it is)
        self.assertIsNone(ttsvd.compress_locally(field((64, 64, 32)), max_abs_error=1e-9))

    def test_zeros_noise_prime_lengths_and_weak_results(self) -> None:
        z = ttsvd.compress_locally(np.zeros((64, 64, 64), np.float32))
        assert z is not None
        self.assertEqual((z.verdict, z.relative_error, z.max_abs_error, set(z.ranks)), ("compressed", 0.0, 0.0, {1}))
        self.assertFalse(any(c.any() for c in z.cores))
        self.assertEqual(z.nbytes, 4 * sum(z.modes))
        rng = np.random.default_rng(7)
        noise = rng.standard_normal((64, 64, 16)).astype(np.float32)
        self.assertIsNone(ttsvd.compress_locally(noise), "noise: no TT at a ratio of 1.2")
        self.assertIsNone(ttsvd.compress_locally(noise, max_rank=2), "nor under a small max_rank: no TT within the tolerance reaches the ratio")
        self.assertIsNone(ttsvd.compress_locally(field((131071,))), "a prime length is one mode: ratio 1")
        near = (lowrank(rng, 128, 512, 8).reshape(128, 16, 32) + 1e-3 * rng.standard_normal((128, 16, 32))).astype(np.float32)
        weak = ttsvd.compress_locally(near, tolerance=1e-2, max_rank=4)
        assert weak is not None
        self.assertEqual(weak.verdict, "weak", "above the tolerance under the caller's own max_rank")
        self.assertGreater(weak.relative_error, 1e-2)
        self.assertLessEqual(max(weak.ranks), 4)
        good = ttsvd.compress_locally(near, tolerance=1e-2)
        assert good is not None
        self.assertEqual(good.verdict, "compressed")
        self.assertLessEqual(good.relative_error, 1e-2)

    def test_extreme_magnitudes_and_tight_tolerances(self) -> None:
        base = field((64, 64, 32), "float64")
        for dtype, scale in (("float64", 1e300), ("float64", 1e-300), ("float64", 1e-315), ("float32", 1e37), ("float32", 1e-37)):
            with self.subTest(dtype=dtype, scale=scale):
                x = (base * scale).astype(dtype)
                t = ttsvd.compress_locally(x)
                assert t is not None
                self.assertTrue(all(np.isfinite(c).all() for c in t.cores))
                self.assertLessEqual(t.relative_error, 1e-3)
                self.assertLessEqual(t.max_abs_error, 2e-3 * scale)
        # a TT whose decoded values leave float32's range (a rank-2 cap on values near its largest)
        self.assertIsNone(ttsvd.compress_locally((base / np.abs(base).max() * 3.4e38).astype(np.float32), max_rank=2))
        t = ttsvd.compress_locally(base, tolerance=1e-11)
        assert t is not None
        rel, _ = errors(base, ttsvd.reconstruct(t.cores, base.shape, base.dtype))
        self.assertLessEqual(rel, 1e-11)

    def test_the_same_data_give_the_same_cores(self) -> None:
        # a retried put sends the same body: its Idempotency-Key then names the same request
        rng = np.random.default_rng(11)
        x = (lowrank(rng, 256, 256, 40) + 1e-3 * rng.standard_normal((256, 256))).astype(np.float32)
        a, b = ttsvd.compress_locally(x, tolerance=1e-2), ttsvd.compress_locally(x.copy(), tolerance=1e-2)
        assert a is not None and b is not None
        self.assertEqual(a.ranks, b.ranks)
        for ca, cb in zip(a.cores, b.cores):
            self.assertEqual(ca.tobytes(), cb.tobytes())

    def test_memory_stays_within_two_float64_copies(self) -> None:
        # 2**20 float32 values of rank 24 (the remainders stay large), read in blocks of 2**14:
        # the sweep and the measurement hold at most two float64 arrays the size of the data
        rng = np.random.default_rng(5)
        x = (lowrank(rng, 1024, 1024, 24) + 1e-4 * rng.standard_normal((1024, 1024))).astype(np.float32)
        with mock.patch.object(ttsvd, "BLOCK", 1 << 14):
            tracemalloc.start()
            try:
                t = ttsvd.compress_locally(x, tolerance=1e-3)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        assert t is not None
        self.assertLessEqual(t.relative_error, 1e-3)
        self.assertLess(peak, 2 * 8 * x.size, f"peak {peak} bytes for {x.nbytes} bytes of float32 data")


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Records each request (path, query, headers, JSON or raw body) and answers from the script."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        u = urllib.parse.urlsplit(self.path)
        ct = self.headers.get("Content-Type", "")
        self.server.seen.append({"path": u.path, "query": dict(urllib.parse.parse_qsl(u.query)), "headers": dict(self.headers),  # type: ignore[attr-defined]
                                 "json": json.loads(body) if ct.startswith("application/json") else None, "raw": body})
        status, answer = self.server.script.pop(0)  # type: ignore[attr-defined]
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


STORED = {"namespace": NS, "key": "k", "version": 1, "verdict": "compressed", "compressed": True, "compression_ratio": 99.0,
          "relative_error": 0, "max_abs_error": 0, "dtype": "float32", "shape": [16, 16, 16], "tt": {"modes": [16, 16, 16], "ranks": [1, 2, 2, 1]},
          "bytes_in": 16384, "bytes_stored": 100, "fingerprint": {"sha256": "0" * 64, "codec": "tt", "tt": None, "norm": 1.0}}


class WireFormat(unittest.TestCase):
    """What the client sends, against a local server that records it."""

    def setUp(self) -> None:
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
        self.srv.script = []  # type: ignore[attr-defined]
        self.srv.seen = []  # type: ignore[attr-defined]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        self.c = Client(self.url, "svc_live_" + "k" * 40, local_compress_bytes=0)

    def tearDown(self) -> None:
        self.c.close()
        self.srv.shutdown()
        self.srv.server_close()

    def test_a_large_float_put_is_sent_as_put_cores(self) -> None:
        x = field((16, 16, 16))
        self.srv.script.append((201, STORED))  # type: ignore[attr-defined]
        r = self.c.put(NS, "k", x, tolerance=1e-3, metadata={"run": "é"}, if_version=0, idempotency_key="cores-1")
        (req,) = self.srv.seen  # type: ignore[attr-defined]
        self.assertEqual(req["path"], "/v1/put_cores")
        self.assertEqual(req["headers"]["Content-Type"], "application/json")
        self.assertEqual(req["headers"]["Idempotency-Key"], "cores-1")
        body = req["json"]
        self.assertEqual(set(body), {"namespace", "key", "cores", "shape", "metadata", "if_version"})
        self.assertEqual((body["namespace"], body["key"], body["shape"], body["metadata"], body["if_version"]), (NS, "k", [16, 16, 16], {"run": "é"}, 0))
        cores = []
        rank = 1
        for c in body["cores"]:
            self.assertEqual(set(c), {"shape", "dtype", "data_b64"})
            self.assertEqual((c["dtype"], c["shape"][0]), ("float32", rank))
            rank = c["shape"][2]
            cores.append(np.frombuffer(base64.b64decode(c["data_b64"]), dtype="<f4").reshape(c["shape"]))
        self.assertEqual(rank, 1)
        self.assertEqual([c.shape[1] for c in cores], ttsvd.choose_modes(x.shape))
        rel, mx = errors(x, ttsvd.reconstruct(cores, x.shape, x.dtype))
        self.assertLessEqual(rel, 1e-3)
        # the answer: put_cores' with the verdict and the errors measured here, as the Node client builds it
        self.assertEqual(r, {**STORED, "verdict": "compressed", "compressed": True, "relative_error": r["relative_error"], "max_abs_error": r["max_abs_error"]})
        self.assertAlmostEqual(r["relative_error"], rel, delta=1e-7)
        self.assertAlmostEqual(r["max_abs_error"], mx, delta=1e-7)
        self.assertGreater(r["relative_error"], 0)

    def test_byte_order_and_layout_of_the_array_do_not_matter(self) -> None:
        x = field((16, 16, 32))
        for name, a in (("big-endian", x.astype(">f4")), ("Fortran order", np.asfortranarray(x)), ("a strided view", field((16, 32, 32))[:, ::2, :])):
            with self.subTest(name):
                self.srv.seen.clear()  # type: ignore[attr-defined]
                self.srv.script.append((201, STORED))  # type: ignore[attr-defined]
                r = self.c.put(NS, "k", a)
                body = self.srv.seen[0]["json"]  # type: ignore[attr-defined]
                self.assertEqual((self.srv.seen[0]["path"], body["shape"]), ("/v1/put_cores", [16, 16, 32]))  # type: ignore[attr-defined]
                cores = [np.frombuffer(base64.b64decode(c["data_b64"]), dtype="<f4").reshape(c["shape"]) for c in body["cores"]]
                rel, _ = errors(np.asarray(a, dtype=np.float32), ttsvd.reconstruct(cores, x.shape, np.dtype(np.float32)))
                self.assertLessEqual(rel, 1e-3)
                self.assertAlmostEqual(r["relative_error"], rel, delta=1e-9)

    def test_float64_cores_travel_as_float64(self) -> None:
        x = field((32, 40), "float64")
        self.srv.script.append((201, STORED))  # type: ignore[attr-defined]
        self.c.put(NS, "k", x, max_abs_error=1e-6)
        body = self.srv.seen[0]["json"]  # type: ignore[attr-defined]
        self.assertEqual({c["dtype"] for c in body["cores"]}, {"float64"})
        cores = [np.frombuffer(base64.b64decode(c["data_b64"]), dtype="<f8").reshape(c["shape"]) for c in body["cores"]]
        self.assertLessEqual(errors(x, ttsvd.reconstruct(cores, x.shape, x.dtype))[1], 1e-6)
        self.assertNotIn("metadata", body)
        self.assertNotIn("if_version", body)

    def test_what_goes_as_it_is(self) -> None:
        rng = np.random.default_rng(2)
        smooth = field((16, 16, 16))
        cases = [
            ("noise", lambda c: c.put(NS, "k", rng.standard_normal((16, 16, 16)).astype(np.float32))),
            ("under 4096 bytes", lambda c: c.put(NS, "k", field((16, 16, 3)))),
            ("codec pred", lambda c: c.put(NS, "k", smooth, codec="pred")),
            ("codec lossless", lambda c: c.put(NS, "k", smooth, codec="lossless")),
            ("tolerance 0", lambda c: c.put(NS, "k", smooth, tolerance=0)),
            ("max_abs_error 0", lambda c: c.put(NS, "k", smooth, max_abs_error=0)),
            ("int32", lambda c: c.put(NS, "k", np.arange(4096, dtype=np.int32))),
            ("float16", lambda c: c.put(NS, "k", smooth.astype(np.float16))),
            ("bytes", lambda c: c.put(NS, "k", bytes(8192))),
            ("local_compress_bytes False", lambda c: Client(self.url, "svc_live_" + "k" * 40, local_compress_bytes=False).put(NS, "k", smooth)),
            ("below local_compress_bytes", lambda c: Client(self.url, "svc_live_" + "k" * 40, local_compress_bytes=16385).put(NS, "k", smooth)),
        ]
        for name, call in cases:
            with self.subTest(name):
                self.srv.seen.clear()  # type: ignore[attr-defined]
                self.srv.script.append((201, {"version": 1}))  # type: ignore[attr-defined]
                call(self.c)
                (req,) = self.srv.seen  # type: ignore[attr-defined]
                self.assertEqual(req["path"], "/v1/put")
                self.assertEqual(req["headers"]["Content-Type"], "application/octet-stream")
        self.srv.seen.clear()  # type: ignore[attr-defined]
        self.srv.script.append((201, STORED))  # type: ignore[attr-defined]
        Client(self.url, "svc_live_" + "k" * 40, local_compress_bytes=16384).put(NS, "k", smooth)
        self.assertEqual(self.srv.seen[0]["path"], "/v1/put_cores", "at local_compress_bytes exactly: compressed")  # type: ignore[attr-defined]

    def test_cores_past_the_limit_are_one_sentence_with_the_servers(self) -> None:
        detail = "The request body of 4242 bytes is larger than the upload limit of 1000 bytes (SVC_ENGINE_MAX_UPLOAD_BYTES)."
        self.srv.script.append((413, {"code": "payload_too_large", "detail": detail, "request_id": "r-413"}))  # type: ignore[attr-defined]
        with self.assertRaises(SvcError) as e:
            self.c.put(NS, "k", field((32, 32, 32)))
        err = e.exception
        self.assertEqual((err.code, err.status, err.request_id), ("payload_too_large", 413, "r-413"))
        self.assertRegex(err.detail, r"^Even compressed to \d+ bytes of TT cores \(ratio [\d.]+\), the tensor is past the upload limit: "
                                     + re.escape(detail[:-1]) + r"; raise SVC_ENGINE_MAX_UPLOAD_BYTES on the engine and the gateway, "
                                     r"or allow a larger tolerance or a smaller max_rank\.$")

    def test_bad_options_and_hostile_data_send_nothing(self) -> None:
        big = field((16, 16, 16))
        nan = big.copy()
        nan[3, 4, 5] = np.nan
        inf = field((64, 64), "float64")
        inf[-1, -1] = -np.inf
        calls = [
            ("NaN", lambda: self.c.put(NS, "k", nan)),
            ("-inf", lambda: self.c.put(NS, "k", inf)),
            ("tolerance below float32's floor for codec tt", lambda: self.c.put(NS, "k", big, tolerance=1e-9, codec="tt")),
            ("tolerance below float64's floor for codec tt", lambda: self.c.put(NS, "k", big.astype(np.float64), tolerance=1e-13, codec="tt")),
            ("max_rank 0", lambda: self.c.put(NS, "k", big, max_rank=0)),
            ("max_rank 1025", lambda: self.c.put(NS, "k", big, max_rank=1025)),
            ("max_rank 2.5", lambda: self.c.put(NS, "k", big, max_rank=2.5)),
            ("tolerance -1", lambda: self.c.put(NS, "k", big, tolerance=-1)),
            ("max_abs_error 'x'", lambda: self.c.put(NS, "k", big, max_abs_error="x")),
        ]
        for name, call in calls:
            with self.subTest(name):
                with self.assertRaises(SvcError) as e:
                    call()
                self.assertEqual(e.exception.code, "validation_error", e.exception.detail)
                self.assertTrue(e.exception.detail.endswith("."))
        with self.assertRaises(SvcError) as e:
            self.c.put(NS, "k", big, tolerance=1e-9, codec="tt")
        self.assertEqual((e.exception.field, e.exception.detail),
                         ("tolerance", "tolerance 1e-09 is below the TT engine's floor of 1e-06 for float32 data; use codec auto or pred."))
        for bad in (-1, 1.5, "64", True, None, float("nan"), [1]):
            with self.subTest(local_compress_bytes=bad):
                with self.assertRaises(SvcError) as e:
                    Client(self.url, "k", local_compress_bytes=bad)  # type: ignore[arg-type]
                self.assertEqual((e.exception.code, e.exception.field), ("validation_error", "local_compress_bytes"))
        self.assertEqual(self.srv.seen, [], "nothing was sent")  # type: ignore[attr-defined]
        self.assertIsNone(self.c.last_response)


@unittest.skipUnless(URL and KEY and LIMIT, "SVC_TEST_GATEWAY_URL, SVC_TEST_API_KEY and SVC_TEST_MAX_UPLOAD_BYTES name no gateway")
class PastTheUploadLimit(unittest.TestCase):
    """Puts past the gateway's upload limit (256 KiB), served back and measured."""

    def setUp(self) -> None:
        self.c = Client(URL, KEY, local_compress_bytes=64 * 1024)  # type: ignore[arg-type]

    def tearDown(self) -> None:
        self.c.close()

    def served_as_promised(self, key: str, x: np.ndarray, r: dict, tolerance: float | None) -> np.ndarray:
        y = self.c.serve(NS, key)
        self.assertEqual((y.dtype, y.shape), (x.dtype, x.shape))
        rel, mx = errors(x, y)
        if tolerance is not None:
            self.assertLessEqual(rel, tolerance)
        # the reported errors are those of the served values (the server decodes float32 in float32)
        ulp = float(np.spacing(np.abs(x).max().astype(x.dtype)))
        self.assertAlmostEqual(r["relative_error"], rel, delta=1e-6 * rel + 4 * ulp)
        self.assertAlmostEqual(r["max_abs_error"], mx, delta=1e-6 * mx + 4 * ulp)
        return y

    def test_smooth_fields_past_the_limit_are_stored_as_tt(self) -> None:
        for dtype in ("float32", "float64"):
            with self.subTest(dtype=dtype):
                x = field((64, 64, 32), dtype)
                self.assertGreaterEqual(x.nbytes, 2 * LIMIT)
                key = f"big/{dtype}"
                r = self.c.put(NS, key, x, tolerance=1e-3, metadata={"run": 1})
                self.assertEqual(set(r), PUT_ANSWER_FIELDS)
                self.assertEqual([r["dtype"], r["shape"], r["bytes_in"], r["verdict"], r["compressed"], r["fingerprint"]["codec"]],
                                 [dtype, [64, 64, 32], x.nbytes, "compressed", True, "tt"])
                self.assertEqual(r["tt"]["modes"], ttsvd.choose_modes(x.shape))
                self.assertLess(r["bytes_stored"] * 20, x.nbytes)
                self.assertEqual(r["compression_ratio"], r["bytes_in"] / r["bytes_stored"])
                self.assertTrue(0 < r["relative_error"] <= 1e-3)
                self.served_as_promised(key, x, r, 1e-3)
                info = self.c.get(NS, key)
                self.assertEqual([info["verdict"], info["relative_error"], info["metadata"], info["version"]], ["compressed", 0, {"run": 1}, r["version"]],
                                 "the stored record is put_cores' (relative_error 0), with the metadata")

    def test_every_element_within_max_abs_error(self) -> None:
        x = field((64, 64, 64), "float32")
        r = self.c.put(NS, "big/mae", x, max_abs_error=1e-4)
        self.assertEqual(r["fingerprint"]["codec"], "tt")
        self.assertLessEqual(r["max_abs_error"], 1e-4)
        y = self.served_as_promised("big/mae", x, r, None)
        self.assertLessEqual(float(np.max(np.abs(y.astype(np.float64) - x))), 1e-4 + float(np.spacing(np.float32(x.max()))))

    def test_1d_dims_of_one_and_zeros(self) -> None:
        cases = [("1d", field((131072,))), ("ones", field((1, 256, 1, 512))), ("f64-1d", field((65536,), "float64"))]
        for name, x in cases:
            with self.subTest(name):
                r = self.c.put(NS, f"big/{name}", x)
                self.assertEqual((r["fingerprint"]["codec"], r["shape"]), ("tt", list(x.shape)))
                self.served_as_promised(f"big/{name}", x, r, 1e-3)
        z = np.zeros((64, 64, 64), np.float32)
        r = self.c.put(NS, "big/zeros", z)
        self.assertEqual([r["verdict"], r["relative_error"], r["max_abs_error"], set(r["tt"]["ranks"])], ["compressed", 0.0, 0.0, {1}])
        np.testing.assert_array_equal(self.c.serve(NS, "big/zeros"), z)

    def test_a_weak_tt_only_under_the_callers_max_rank(self) -> None:
        rng = np.random.default_rng(4)
        x = (lowrank(rng, 128, 1024, 8).reshape(128, 32, 32) + 1e-3 * rng.standard_normal((128, 32, 32))).astype(np.float32)
        r = self.c.put(NS, "big/weak", x, tolerance=1e-2, max_rank=4)
        self.assertEqual((r["verdict"], r["compressed"], r["fingerprint"]["codec"]), ("weak", True, "tt"))
        self.assertGreater(r["relative_error"], 1e-2)
        self.served_as_promised("big/weak", x, r, None)
        self.assertEqual(self.c.get(NS, "big/weak")["verdict"], "compressed", "put_cores records a given TT as compressed")

    def test_idempotency_and_if_version_apply_to_the_cores(self) -> None:
        x = field((64, 64, 32))
        r1 = self.c.put(NS, "big/idem", x, idempotency_key="py-cores-1")
        r2 = self.c.put(NS, "big/idem", x, idempotency_key="py-cores-1")
        self.assertEqual(r1, r2)
        self.assertEqual(self.c.last_response["headers"].get("idempotent-replayed"), "true")  # type: ignore[index]
        with self.assertRaises(SvcError) as e:
            self.c.put(NS, "big/idem", x, if_version=0)
        self.assertEqual((e.exception.code, e.exception.status), ("version_conflict", 409))

    def test_without_local_compression_the_put_meets_the_413_with_one_sentence(self) -> None:
        x = field((64, 64, 32))
        for c in (Client(URL, KEY, local_compress_bytes=False), Client(URL, KEY)):  # type: ignore[arg-type]
            with self.subTest(local_compress_bytes=c._local_from):
                with self.assertRaises(SvcError) as e:
                    c.put(NS, "big/off", x)
                c.close()
                err = e.exception
                self.assertEqual((err.code, err.status), ("payload_too_large", 413))
                self.assertRegex(err.request_id or "", r"^[0-9a-f-]{36}$")
                self.assertEqual(err.detail, f"The tensor of {x.nbytes} bytes is past the upload limit: The request body of {x.nbytes} bytes is larger "
                                             f"than the upload limit of {LIMIT} bytes (SVC_ENGINE_MAX_UPLOAD_BYTES); raise SVC_ENGINE_MAX_UPLOAD_BYTES on "
                                             f"the engine and the gateway, or pass local_compress_bytes of at most {x.nbytes} to this client to send it "
                                             "as TT cores, or put it with the Node client (createClient) or `svc put`, which can compress it with the "
                                             "prediction codec.")

    def test_what_tt_cannot_compress_goes_as_it_is(self) -> None:
        rng = np.random.default_rng(9)
        small = rng.standard_normal((64, 64, 16)).astype(np.float32)  # 256 KiB: within the limit
        r = self.c.put(NS, "noise/small", small, tolerance=1e-3)
        self.assertNotEqual(r["fingerprint"]["codec"], "tt", "stored by the engine from the values")
        self.assertLessEqual(errors(small, self.c.serve(NS, "noise/small"))[0], 1e-3)
        for name, x in (("noise", rng.standard_normal((64, 64, 32)).astype(np.float32)), ("prime length", field((131071,)))):
            with self.subTest(name):
                with self.assertRaises(SvcError) as e:
                    self.c.put(NS, "noise/big", x)
                self.assertEqual((e.exception.code, e.exception.status), ("payload_too_large", 413))
                self.assertTrue(e.exception.detail.startswith(f"The tensor of {x.nbytes} bytes is past the upload limit and TT does not compress it "
                                                              "within the put's bounds at a ratio of 1.2: The request body of "), e.exception.detail)
                self.assertTrue(e.exception.detail.endswith("or put it with the Node client (createClient) or `svc put`, which can compress it "
                                                            "with the prediction codec."), e.exception.detail)
        self.assertEqual(self.c.put(NS, "after", b"ok")["key"], "after", "the next call works")

    def test_cores_past_the_limit(self) -> None:
        # rank 150 in float64: cores of 1.3 MB, above the JSON body the limit allows (base64 plus 1 MiB)
        rng = np.random.default_rng(8)
        x = lowrank(rng, 512, 512, 150)
        with self.assertRaises(SvcError) as e:
            self.c.put(NS, "big/rank150", x)
        err = e.exception
        self.assertEqual((err.code, err.status), ("payload_too_large", 413))
        json_limit = math.ceil(LIMIT * 4 / 3) + 1024 * 1024
        self.assertRegex(err.detail, r"^Even compressed to \d+ bytes of TT cores \(ratio 1\.6\), the tensor is past the upload limit: "
                                     rf"The request body of \d+ bytes is larger than the upload limit of {json_limit} bytes \(SVC_ENGINE_MAX_UPLOAD_BYTES\); "
                                     r"raise SVC_ENGINE_MAX_UPLOAD_BYTES on the engine and the gateway, or allow a larger tolerance or a smaller max_rank\.$")


if __name__ == "__main__":
    sys.exit(unittest.main())
