"""The numpy client against a real gateway and engine (SVC_TEST_GATEWAY_URL, SVC_TEST_API_KEY,
started by test/python/client.test.ts), and its retry rules against a local HTTP server
that answers 429 and 503 on purpose."""

from __future__ import annotations

import http.server
import json
import os
import re
import sys
import threading
import unittest

import numpy as np

from svc_tensor import Client, SvcError

URL = os.environ.get("SVC_TEST_GATEWAY_URL")
KEY = os.environ.get("SVC_TEST_API_KEY")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
NS = "py"


@unittest.skipUnless(URL and KEY, "SVC_TEST_GATEWAY_URL and SVC_TEST_API_KEY name no gateway")
class OverAGateway(unittest.TestCase):
    def setUp(self) -> None:
        self.c = Client(URL, KEY)  # type: ignore[arg-type]

    def tearDown(self) -> None:
        self.c.close()

    def test_put_get_serve_round_trip_of_several_dtypes(self) -> None:
        rng = np.random.default_rng(1)
        for dtype in ("float32", "float64", "float16", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool"):
            with self.subTest(dtype=dtype):
                if dtype == "bool":
                    a = rng.random((6, 7)) > 0.5
                else:
                    a = (rng.random((6, 7)) * 100).astype(dtype)
                r = self.c.put(NS, f"rt/{dtype}", a, tolerance=0)
                self.assertEqual((r["dtype"], r["shape"]), (dtype, [6, 7]))
                got = self.c.serve(NS, f"rt/{dtype}")
                self.assertEqual(got.dtype, a.dtype)
                self.assertEqual(got.shape, a.shape)
                np.testing.assert_array_equal(got, a)
                self.assertTrue(got.flags.writeable, "the served array is writable")
                self.assertEqual(self.c.last_response["headers"]["content-type"], "application/octet-stream")
        info = self.c.get(NS, "rt/int32")
        self.assertEqual((info["dtype"], info["shape"], info["version"]), ("int32", [6, 7], 1))

    def test_lossy_put_within_tolerance_slice_and_version(self) -> None:
        x = np.linspace(0, 1, 64, dtype=np.float64)
        a = np.sin(np.add.outer(np.add.outer(x, 2 * x), 3 * x)).astype(np.float32)  # smooth, compressible
        r = self.c.put(NS, "field/a", a, tolerance=1e-3, metadata={"run": {"seed": 3}, "label": "Grüße 😀"})
        self.assertEqual(r["version"], 1)
        self.assertTrue(r["relative_error"] <= 1e-3)
        full = self.c.serve(NS, "field/a")
        self.assertEqual((full.dtype, full.shape), (np.float32, (64, 64, 64)))
        rel = np.linalg.norm(full.astype(np.float64) - a) / np.linalg.norm(a.astype(np.float64))
        self.assertLessEqual(rel, 1e-3 * 1.0001)
        part = self.c.serve(NS, "field/a", slice=[(0, 4), (10, 12), (60, 64)])
        self.assertEqual(part.shape, (4, 2, 4))
        np.testing.assert_allclose(part, full[0:4, 10:12, 60:64], rtol=0, atol=1e-6)
        self.c.put(NS, "field/a", a * 2, tolerance=0, if_version=1)
        np.testing.assert_array_equal(self.c.serve(NS, "field/a", version=2), a * 2)
        self.assertEqual(self.c.get(NS, "field/a", version=1)["metadata"], {"run": {"seed": 3}, "label": "Grüße 😀"})
        with self.assertRaises(SvcError) as e:
            self.c.put(NS, "field/a", a, if_version=1)
        self.assertEqual((e.exception.code, e.exception.status), ("version_conflict", 409))

    def test_bytes_and_big_endian_arrays(self) -> None:
        self.c.put(NS, "blob", b"\x00\x01binary\xff")
        self.assertEqual(self.c.serve(NS, "blob"), b"\x00\x01binary\xff")
        be = np.arange(10, dtype=">i4").reshape(2, 5)
        self.c.put(NS, "be", be)
        got = self.c.serve(NS, "be")
        np.testing.assert_array_equal(got, be)
        self.assertEqual(got.dtype, np.dtype("int32"))
        nc = np.arange(20, dtype=np.float64).reshape(4, 5).T  # not C-contiguous
        self.c.put(NS, "fortran", nc, tolerance=0)
        np.testing.assert_array_equal(self.c.serve(NS, "fortran"), nc)

    def test_list_search_topk_similarity_delete(self) -> None:
        base = np.linspace(-1, 1, 32)
        for i in range(4):
            self.c.put(NS, f"vec/{i}", (base + i * 0.1).astype(np.float64), tolerance=0, metadata={"kind": "a" if i % 2 else "b", "i": i})
        lst = self.c.list(NS, prefix="vec/")
        self.assertEqual([k["key"] for k in lst["keys"]], ["vec/0", "vec/1", "vec/2", "vec/3"])
        found = self.c.search(NS, filter={"kind": "a", "i": {"$gte": 2}})
        self.assertEqual([r["key"] for r in found["results"]], ["vec/3"])
        top = self.c.topk(NS, key="vec/0", k=2, metric="l2")
        self.assertEqual([r["key"] for r in top["results"]], ["vec/1", "vec/2"])
        top_v = self.c.topk(NS, vector=base + 0.3, k=1, metric="l2")
        self.assertEqual(top_v["results"][0]["key"], "vec/3")
        sim = self.c.similarity(NS, "vec/0", "vec/0")
        self.assertAlmostEqual(sim["score"], 1.0, places=6)
        d = self.c.delete(NS, "vec/3")
        self.assertTrue(d["deleted"])
        with self.assertRaises(SvcError) as e:
            self.c.get(NS, "vec/3")
        err = e.exception
        self.assertEqual((err.code, err.status), ("not_found", 404))
        self.assertRegex(err.request_id or "", UUID)
        self.assertEqual(err.request_id, self.c.last_response["request_id"])
        self.assertTrue(err.detail.endswith("."))

    def test_idempotency_keys(self) -> None:
        a = np.arange(8, dtype=np.int32)
        r1 = self.c.put(NS, "idem", a, idempotency_key="py-idem-1")
        r2 = self.c.put(NS, "idem", a, idempotency_key="py-idem-1")
        self.assertEqual(r1["version"], r2["version"])
        self.assertEqual(self.c.last_response["headers"].get("idempotent-replayed"), "true")
        with self.assertRaises(SvcError) as e:
            self.c.put(NS, "idem", a + 1, idempotency_key="py-idem-1")
        self.assertEqual((e.exception.code, e.exception.status), ("idempotency_key_reused", 422))
        r3 = self.c.put(NS, "idem", a)
        self.assertEqual(r3["version"], r1["version"] + 1, "without a key, a second put is a new version")

    def test_gateway_errors(self) -> None:
        with self.assertRaises(SvcError) as e:
            self.c.list("elsewhere")
        self.assertEqual((e.exception.code, e.exception.status), ("forbidden", 403))
        stranger = Client(URL, "svc_live_" + "x" * 40)  # type: ignore[arg-type]
        with self.assertRaises(SvcError) as e:
            stranger.list(NS)
        stranger.close()
        self.assertEqual((e.exception.code, e.exception.status), ("unauthorized", 401))
        self.assertRegex(e.exception.request_id or "", UUID)

    def test_a_body_past_the_upload_limit_is_refused_with_its_sentence(self) -> None:
        limit = int(os.environ.get("SVC_TEST_MAX_UPLOAD_BYTES") or 0)
        if limit <= 0:
            self.skipTest("SVC_TEST_MAX_UPLOAD_BYTES names no upload limit")
        # http.client sends the whole body before it reads the answer: the refusal, sent when the
        # headers arrived, is still read (the server drops the rest of the body, no reset)
        with self.assertRaises(SvcError) as e:
            self.c.put(NS, "too-big", bytes(2 * limit))
        self.assertEqual((e.exception.code, e.exception.status), ("payload_too_large", 413))
        self.assertIn(f"larger than the upload limit of {limit} bytes", str(e.exception))
        self.assertEqual(self.c.put(NS, "after-too-big", b"ok")["key"], "after-too-big", "the next call works")

    def test_bad_arguments_send_nothing(self) -> None:
        self.c.list(NS)
        before = self.c.last_response
        a = np.zeros(4, dtype=np.float32)
        deep: dict = {}
        for _ in range(100_000):
            deep = {"x": deep}
        bad_calls = [
            lambda: self.c.put("bad ns", "k", a),
            lambda: self.c.put(NS, "../k", a),
            lambda: self.c.put(NS, "a//b", a),
            lambda: self.c.put(NS, "k", np.array([1.0, np.nan])),
            lambda: self.c.put(NS, "k", np.array([1.0, np.inf], dtype=np.float32)),
            lambda: self.c.put(NS, "k", np.array(["text"])),
            lambda: self.c.put(NS, "k", np.array([1 + 2j])),
            lambda: self.c.put(NS, "k", np.float32(1.0)),
            lambda: self.c.put(NS, "k", [1, 2, 3]),
            lambda: self.c.put(NS, "k", a, tolerance=1),
            lambda: self.c.put(NS, "k", a, tolerance=float("nan")),
            lambda: self.c.put(NS, "k", a, tolerance=True),
            lambda: self.c.put(NS, "k", a, codec="zip"),
            lambda: self.c.put(NS, "k", a, max_rank=0),
            lambda: self.c.put(NS, "k", a, if_version=-1),
            lambda: self.c.put(NS, "k", a, metadata=["not", "a", "dict"]),
            lambda: self.c.put(NS, "k", a, metadata={"x": float("nan")}),
            lambda: self.c.put(NS, "k", a, metadata={"x": "y" * 70_000}),
            lambda: self.c.put(NS, "k", a, idempotency_key="has space"),
            lambda: self.c.put(NS, "k", a, idempotency_key="x" * 256),
            lambda: self.c.serve(NS, "k", slice=[(3, 1)]),
            lambda: self.c.serve(NS, "k", slice=[(0, 1, 2)]),
            lambda: self.c.serve(NS, "k", slice=5),
            lambda: self.c.serve(NS, "k", dtype="int8"),
            lambda: self.c.topk(NS),
            lambda: self.c.topk(NS, key="k", vector=a),
            lambda: self.c.topk(NS, vector=np.array([])),
            lambda: self.c.topk(NS, vector=np.array(["a"])),
            lambda: self.c.topk(NS, key="k", k=0),
            lambda: self.c.topk(NS, key="k", metric="manhattan"),
            lambda: self.c.search(NS, filter="kind=a"),
            lambda: self.c.list(NS, limit=1001),
            lambda: self.c.get(NS, "k", version=0),
            # shapes the server refuses whatever the entry (lib/fields.ts)
            lambda: self.c.put(NS, "k", np.zeros((3, 0), dtype=np.float32)),
            lambda: self.c.put(NS, "k", np.zeros(0, dtype=np.uint8)),
            lambda: self.c.put(NS, "k", np.zeros((1,) * 33, dtype=np.uint8)),
            lambda: self.c.put(NS, "k", np.broadcast_to(np.zeros(1, dtype=np.bool_), (2**31,))),
            lambda: self.c.serve(NS, "k", slice=[(1, 1)]),
            lambda: self.c.serve(NS, "k", slice=[]),
            lambda: self.c.serve(NS, "k", slice=[(0, 1)] * 33),
            lambda: self.c.topk(NS, vector=np.ones((1,) * 33)),
            lambda: self.c.search(NS, filter=deep),
        ]
        for i, call in enumerate(bad_calls):
            with self.subTest(case=i):
                with self.assertRaises(SvcError) as e:
                    call()
                self.assertEqual(e.exception.code, "validation_error")
                self.assertTrue(e.exception.detail.endswith("."), e.exception.detail)
        self.assertIs(self.c.last_response, before, "no request was sent")
        for bad in (lambda: Client("ftp://x", "k"), lambda: Client("http://127.0.0.1:1", ""), lambda: Client("http://h", "k", max_retries=-1),
                    lambda: Client("http://h", "k", timeout=0), lambda: Client(None, "k"),  # type: ignore[arg-type]
                    lambda: Client("http://h", "k", max_answer_bytes=0), lambda: Client("http://h", "k", max_answer_bytes=2.0**20)):  # type: ignore[arg-type]
            with self.assertRaises(SvcError):
                bad()

    def test_the_server_refuses_the_shapes_the_client_refuses(self) -> None:
        # the local checks of zero-size arrays, 33 dimensions and empty slices copy server rules: sent
        # past the client's checks, each is a 400
        self.c.put(NS, "shape-rules", np.zeros((2, 2), dtype=np.uint8))
        raw_puts = [("3,0", b""), ("0", b""), (",".join(["1"] * 33), b"\x00"), (",".join(["1"] * 32), b"\x00")]
        for shape, data in raw_puts:
            with self.subTest(shape=shape):
                call = lambda: self.c._json("POST", "/v1/put", query={"namespace": NS, "key": "shape-rules/raw", "dtype": "uint8", "shape": shape},  # noqa: E731
                                            raw=data, write=True)
                if shape.count(",") == 31:
                    self.assertEqual(call()["shape"], [1] * 32, "32 dimensions are kept")
                    continue
                with self.assertRaises(SvcError) as e:
                    call()
                self.assertEqual((e.exception.code, e.exception.status), ("bad_request", 400), e.exception.detail)
        for sl in ([[1, 1], [0, 2]], [], [[0, 1]] * 33):
            with self.subTest(slice=sl):
                with self.assertRaises(SvcError) as e:
                    self.c._call("POST", "/v1/serve", json_body={"namespace": NS, "key": "shape-rules", "slice": sl}, octet=True)
                self.assertEqual((e.exception.code, e.exception.status), ("bad_request", 400), e.exception.detail)
        np.testing.assert_array_equal(self.c.serve(NS, "shape-rules", slice=[(1, 2), (0, 2)]), np.zeros((1, 2), np.uint8))
        np.testing.assert_array_equal(self.c.serve(NS, "shape-rules/raw"), np.zeros((1,) * 32, np.uint8))

    def test_one_connection_is_kept_alive(self) -> None:
        self.c.list(NS)
        conn = self.c._conn
        self.c.list(NS)
        self.assertIs(self.c._conn, conn)

    def test_unreachable_service(self) -> None:
        c = Client("http://127.0.0.1:9", "svc_live_" + "x" * 40, timeout=10)
        with self.assertRaises(SvcError) as e:
            c.list(NS)
        self.assertEqual(e.exception.code, "engine_unreachable")


class _Scripted(http.server.BaseHTTPRequestHandler):
    """Answers from the server's script, one (status, headers, body) per request, and
    records each request's headers."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        self.server.seen.append(dict(self.headers))  # type: ignore[attr-defined]
        status, headers, body = self.server.script.pop(0)  # type: ignore[attr-defined]
        data = json.dumps(body).encode()
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _answer  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


class Retries(unittest.TestCase):
    def setUp(self) -> None:
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
        self.srv.script = []  # type: ignore[attr-defined]
        self.srv.seen = []  # type: ignore[attr-defined]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.slept: list[float] = []
        self.c = Client(f"http://127.0.0.1:{self.srv.server_address[1]}", "svc_live_" + "k" * 40, sleep=self.slept.append, max_backoff=30)

    def tearDown(self) -> None:
        self.c.close()
        self.srv.shutdown()
        self.srv.server_close()

    def err(self, status: int, code: str, **headers: str) -> tuple:
        return (status, headers, {"detail": f"{code} on purpose.", "code": code, "request_id": "00000000-0000-4000-8000-000000000001"})

    def test_429_and_503_are_retried_with_retry_after_and_one_idempotency_key(self) -> None:
        self.srv.script += [self.err(429, "rate_limited", **{"Retry-After": "2"}), self.err(503, "overloaded", **{"Retry-After": "1"}),
                            (201, {}, {"version": 1})]
        r = self.c.put(NS, "k", np.arange(3, dtype=np.int32))
        self.assertEqual(r, {"version": 1})
        self.assertEqual(self.slept, [2.0, 1.0], "the server's Retry-After is waited as given")
        keys = {h.get("Idempotency-Key") for h in self.srv.seen}
        self.assertEqual(len(self.srv.seen), 3)
        self.assertEqual(len(keys), 1, "every attempt of one write carries the same Idempotency-Key")
        self.assertRegex(keys.pop() or "", r"^[A-Za-z0-9_-]{22}$")
        self.assertEqual(self.c.last_response["attempts"], 3)

    def test_retries_are_bounded(self) -> None:
        self.srv.script += [self.err(429, "rate_limited", **{"Retry-After": "0"})] * 4
        with self.assertRaises(SvcError) as e:
            self.c.list(NS)
        self.assertEqual((e.exception.code, e.exception.status, e.exception.request_id), ("rate_limited", 429, "00000000-0000-4000-8000-000000000001"))
        self.assertEqual(len(self.srv.seen), 4, "one try and max_retries (3) retries")

    def test_a_retry_after_past_max_backoff_is_not_waited_for(self) -> None:
        self.srv.script += [self.err(429, "rate_limited", **{"Retry-After": "3600"})]
        with self.assertRaises(SvcError) as e:
            self.c.list(NS)
        self.assertEqual(e.exception.retry_after, 3600.0)
        self.assertEqual(self.slept, [])

    def test_the_monthly_quota_and_plain_errors_are_not_retried(self) -> None:
        self.srv.script += [self.err(503, "quota_exhausted", **{"Retry-After": "10"}), self.err(400, "bad_request")]
        for code in ("quota_exhausted", "bad_request"):
            with self.assertRaises(SvcError) as e:
                self.c.list(NS)
            self.assertEqual(e.exception.code, code)
        self.assertEqual((len(self.srv.seen), self.slept), (2, []))

    def test_own_backoff_without_retry_after_and_a_body_that_is_not_json(self) -> None:
        self.srv.script += [(503, {"Retry-After": "x"}, "not an error body"), (502, {}, {"detail": "down.", "code": "engine_unreachable"}), (200, {}, {"keys": []})]
        self.c.list(NS)
        self.assertEqual(len(self.slept), 2)
        self.assertTrue(0.125 <= self.slept[0] <= 0.25 and 0.25 <= self.slept[1] <= 0.5, f"equal jitter of 0.25 s doubled: {self.slept}")

    def test_a_caller_idempotency_key_is_sent(self) -> None:
        self.srv.script += [(200, {}, {"deleted": True})]
        self.c.delete(NS, "a/b=c@d", idempotency_key="mine-1")
        self.assertEqual(self.srv.seen[0].get("Idempotency-Key"), "mine-1")


if __name__ == "__main__":
    sys.exit(unittest.main())
