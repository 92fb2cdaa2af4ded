"""The numpy client against a local raw-socket server that answers badly on purpose: JSON
nested too deeply, a Content-Length no request can produce, more bytes than a serve's
headers imply, malformed serve answers, and answers trickled a byte at a time past the
client's timeout. Each case is refused with an SvcError of one sentence."""

from __future__ import annotations

import json
import socket
import threading
import time
import unittest
from typing import Callable, Union

import numpy as np

from svc_tensor import Client, SvcError

NS = "py"
RID = "00000000-0000-4000-8000-0000000000aa"
Action = Union[bytes, Callable[[socket.socket], None]]


def answer(status: int, body: bytes, content_type: str = "application/json", length: int | None = None, **headers: str) -> bytes:
    head = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}", f"Content-Length: {len(body) if length is None else length}",
            f"X-Request-Id: {RID}"]
    head += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(status: int, body: bytes, content_type: str = "application/json", chunk: int = 1024, **headers: str) -> Callable[[socket.socket], None]:
    """An answer in chunks of `chunk` bytes, written until the client stops reading."""
    def send(c: socket.socket) -> None:
        head = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}", "Transfer-Encoding: chunked", f"X-Request-Id: {RID}"]
        head += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
        c.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        for i in range(0, len(body), chunk):
            part = body[i:i + chunk]
            c.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        c.sendall(b"0\r\n\r\n")
    return send


def trickle(head: bytes, body: bytes, every: float) -> Callable[[socket.socket], None]:
    """`head` at once, then `body` one byte every `every` seconds."""
    def send(c: socket.socket) -> None:
        c.sendall(head)
        for i in range(len(body)):
            time.sleep(every)
            c.sendall(body[i:i + 1])
    return send


DEEP = b"[" * 200_000 + b"]" * 200_000


class _RawServer:
    """Reads one HTTP request at a time on each connection and answers it with the next entry
    of `script` (bytes, or a function writing to the socket); a connection stays open."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.script: list[Action] = []
        self.requests: list[bytes] = []
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        buf = b""
        with c:
            try:
                while True:
                    while b"\r\n\r\n" not in buf:
                        d = c.recv(65536)
                        if not d:
                            return
                        buf += d
                    head, buf = buf.split(b"\r\n\r\n", 1)
                    n = 0
                    for line in head.split(b"\r\n")[1:]:
                        k, _, v = line.partition(b":")
                        if k.strip().lower() == b"content-length":
                            n = int(v)
                    while len(buf) < n:
                        d = c.recv(65536)
                        if not d:
                            return
                        buf += d
                    self.requests.append(head)
                    buf = buf[n:]
                    action = self.script.pop(0)
                    if callable(action):
                        action(c)
                    else:
                        c.sendall(action)
            except OSError:
                return  # the client closed the connection


class BadAnswers(unittest.TestCase):
    def setUp(self) -> None:
        self.srv = _RawServer()
        self.c = Client(self.srv.url, "svc_live_" + "k" * 40, max_retries=0, timeout=60)

    def tearDown(self) -> None:
        self.c.close()
        self.srv.close()

    def refused(self, call: Callable[[], object], code: str = "internal") -> SvcError:
        with self.assertRaises(SvcError) as e:
            call()
        err = e.exception
        self.assertEqual(err.code, code, err.detail)
        self.assertRegex(err.detail, r"^The service [^.]*\.$", "one sentence")
        return err

    def then_a_good_answer_works(self) -> None:
        self.srv.script.append(answer(200, b'{"keys": []}'))
        self.assertEqual(self.c.list(NS), {"keys": []}, "the next call works")

    # ---- C1: JSON nested too deeply ----------------------------------------------------

    def test_json_nested_too_deeply_on_a_2xx_answer(self) -> None:
        self.srv.script.append(answer(200, DEEP))
        err = self.refused(lambda: self.c.get(NS, "k"))
        self.assertEqual(err.detail, "The service answered with JSON nested too deeply to read.")
        self.assertEqual((err.status, err.request_id), (200, RID))
        self.then_a_good_answer_works()

    def test_json_nested_too_deeply_on_an_error_answer(self) -> None:
        self.srv.script.append(answer(404, DEEP))
        err = self.refused(lambda: self.c.get(NS, "k"), code="not_found")
        self.assertEqual((err.detail, err.status, err.request_id), ("The service answered HTTP 404.", 404, RID))

    def test_json_nested_too_deeply_in_the_json_form_of_serve(self) -> None:
        self.srv.script.append(answer(200, b'{"dtype": "uint8", "shape": [1], "data_b64": "AA==", "x": ' + DEEP + b"}"))
        err = self.refused(lambda: self.c.serve(NS, "k"))
        self.assertEqual(err.detail, "The service answered with JSON nested too deeply to read.")

    def test_json_that_is_not_an_object(self) -> None:
        self.srv.script.append(answer(200, b"[1, 2]"))
        err = self.refused(lambda: self.c.list(NS))
        self.assertEqual(err.detail, "The service answered with JSON that is not an object.")

    def test_malformed_json_forms_of_serve(self) -> None:
        bodies = [
            b'{"dtype": "uint8", "shape": [3], "data_b64": "AA*AA"}',  # a character outside base64
            b'{"dtype": "uint8", "shape": 4, "data_b64": "AAAA"}',
            b'{"dtype": "uint8", "shape": [true, 1, 1], "data_b64": "AA=="}',
            b'{"dtype": "uint8", "shape": [3], "data_b64": "AAAA"}',  # 3 bytes for shape [3]: the control below
            b'["dtype"]',
        ]
        self.srv.script += [answer(200, b) for b in bodies]
        for i in (0, 1, 2):
            with self.subTest(body=bodies[i]):
                self.refused(lambda: self.c.serve(NS, "k"))
        np.testing.assert_array_equal(self.c.serve(NS, "k"), np.zeros(3, np.uint8))
        self.refused(lambda: self.c.serve(NS, "k"))

    # ---- C2: answers larger than the request can produce -------------------------------

    def test_an_absurd_content_length_is_refused_before_reading(self) -> None:
        self.srv.script.append(answer(200, b"{}", length=99_999_999_999_999))
        err = self.refused(lambda: self.c.get(NS, "k"))
        self.assertEqual(err.detail, "The service announced an answer of 99999999999999 bytes, more than the 268435456 bytes the client reads for this request.")
        self.assertEqual(err.status, 200)
        self.then_a_good_answer_works()
        self.assertEqual(self.srv.connections, 2, "the refused answer's connection was closed")

    def test_an_error_answer_is_read_up_to_one_mib(self) -> None:
        # past 1 MiB the body is not read; the status still decides, with its own sentence
        self.srv.script.append(answer(503, b"{}", length=99_999_999_999_999))
        err = self.refused(lambda: self.c.get(NS, "k"), "overloaded")
        self.assertEqual(err.detail, "The service answered HTTP 503.")
        self.assertEqual(err.status, 503)
        self.srv.script.append(chunked(404, json.dumps({"detail": "x" * (2 << 20), "code": "not_found"}).encode()))
        err = self.refused(lambda: self.c.get(NS, "k"), "not_found")
        self.assertEqual(err.detail, "The service answered HTTP 404.")
        self.then_a_good_answer_works()
        self.assertEqual(self.srv.connections, 3, "each unread answer's connection was closed")

    def test_a_429_or_503_too_large_to_read_is_retried(self) -> None:
        c = Client(self.srv.url, "svc_live_" + "k" * 40, max_retries=2, backoff=0.01, max_backoff=0.05)
        self.addCleanup(c.close)
        self.srv.script += [answer(429, b"{}", length=5 << 20, Retry_After="0"), chunked(503, b"[" + b"0," * (1 << 20) + b"0]", Retry_After="0"),
                            answer(200, b'{"keys": ["a"]}')]
        self.assertEqual(c.list(NS), {"keys": ["a"]})
        self.assertEqual(c.last_response["attempts"], 3, "two refusals too large to read, then the answer")

    def test_a_chunked_answer_past_max_answer_bytes_is_refused_while_read(self) -> None:
        c = Client(self.srv.url, "svc_live_" + "k" * 40, max_retries=0, max_answer_bytes=4096)
        self.addCleanup(c.close)
        big = json.dumps({"keys": [], "pad": "x" * (16 << 20)}).encode()
        self.srv.script += [chunked(200, big), chunked(200, json.dumps({"keys": [], "pad": "x" * 4000}).encode())]
        err = self.refused(lambda: c.list(NS))
        self.assertEqual(err.detail, "The service answered more than the 4096 bytes the client reads for this request.")
        self.assertEqual(c.list(NS)["keys"], [], "an answer within the cap is read")

    def test_a_dense_serve_is_read_up_to_the_size_its_headers_imply(self) -> None:
        data = np.arange(6, dtype="<f4").tobytes()
        octet = {"content_type": "application/octet-stream"}
        self.srv.script += [
            answer(200, data, **octet, X_SVC_Dtype="float32", X_SVC_Shape="2,3"),
            answer(200, data, **octet, length=99_999_999_999_999, X_SVC_Dtype="float32", X_SVC_Shape="2,3"),
        ]
        np.testing.assert_array_equal(self.c.serve(NS, "k"), np.arange(6, dtype=np.float32).reshape(2, 3))
        err = self.refused(lambda: self.c.serve(NS, "k"))
        self.assertEqual(err.detail, "The service announced an answer of 99999999999999 bytes, more than the 24 bytes the client reads for this request.")
        # chunked, with no length announced: refused at the 25th byte, not after 16 MiB
        self.srv.script.append(chunked(200, bytes(16 << 20), **octet, X_SVC_Dtype="float32", X_SVC_Shape="2,3"))
        err = self.refused(lambda: self.c.serve(NS, "k"))
        self.assertEqual(err.detail, "The service answered more than the 24 bytes the client reads for this request.")
        self.srv.script.append(answer(200, data[:20], **octet, X_SVC_Dtype="float32", X_SVC_Shape="2,3"))
        err = self.refused(lambda: self.c.serve(NS, "k"))
        self.assertEqual(err.detail, "The service answered 20 bytes for shape [2, 3] of float32.")

    def test_serve_headers_that_break_the_shape_rules(self) -> None:
        octet = {"content_type": "application/octet-stream"}
        cases = [{"X_SVC_Dtype": "float32"}, {"X_SVC_Dtype": "complex64", "X_SVC_Shape": "1"},
                 {"X_SVC_Dtype": "uint8", "X_SVC_Shape": "9" * 5000}, {"X_SVC_Dtype": "uint8", "X_SVC_Shape": ",".join(["1"] * 33)},
                 {"X_SVC_Dtype": "uint8", "X_SVC_Shape": "0"}, {"X_SVC_Dtype": "uint8", "X_SVC_Shape": ""}]
        for h in cases:
            self.srv.script.append(answer(200, b"\x00", **octet, **h))
            with self.subTest(headers=h):
                err = self.refused(lambda: self.c.serve(NS, "k"))
                self.assertEqual(err.detail, "The service answered a serve without valid X-SVC-Dtype and X-SVC-Shape headers.")
        self.srv.script.append(answer(200, b"\x07", **octet, X_SVC_Dtype="uint8", X_SVC_Shape="1,1"))
        np.testing.assert_array_equal(self.c.serve(NS, "k"), np.full((1, 1), 7, np.uint8))

    def test_a_bytes_entry_is_read_up_to_max_answer_bytes(self) -> None:
        c = Client(self.srv.url, "svc_live_" + "k" * 40, max_retries=0, max_answer_bytes=1024)
        self.addCleanup(c.close)
        octet = {"content_type": "application/octet-stream", "X_SVC_Dtype": "bytes"}
        self.srv.script += [answer(200, b"x" * 1024, **octet), answer(200, b"x" * 1025, **octet)]
        self.assertEqual(c.serve(NS, "k"), b"x" * 1024)
        with self.assertRaises(SvcError) as e:
            c.serve(NS, "k")
        self.assertEqual(e.exception.detail, "The service announced an answer of 1025 bytes, more than the 1024 bytes the client reads for this request.")

    # ---- C3: the timeout is a deadline for the whole exchange --------------------------

    def assert_times_out(self, action: Action, call: Callable[[Client], object]) -> None:
        # the trickle takes 60 s; with a deadline the client gives up after its 1 s
        c = Client(self.srv.url, "svc_live_" + "k" * 40, max_retries=0, timeout=1)
        self.addCleanup(c.close)
        self.srv.script.append(action)
        started = time.monotonic()
        with self.assertRaises(SvcError) as e:
            call(c)
        took = time.monotonic() - started
        self.assertEqual((e.exception.code, e.exception.detail), ("engine_unreachable", f"The service at {self.srv.url} did not answer within 1 s."))
        self.assertLess(took, 30, "the client gave up long before the trickle ended")

    def test_a_body_trickled_past_the_timeout(self) -> None:
        body = b'{"keys": []}'.ljust(240)
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        self.assert_times_out(trickle(head, body, 0.25), lambda c: c.list(NS))

    def test_headers_trickled_past_the_timeout(self) -> None:
        rest = b"X-Pad: " + b"a" * 230 + b'\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}'
        self.assert_times_out(trickle(b"HTTP/1.1 200 OK\r\n", rest, 0.25), lambda c: c.list(NS))

    def test_a_serve_trickled_past_the_timeout(self) -> None:
        body = bytes(240)
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nX-SVC-Dtype: uint8\r\nX-SVC-Shape: {len(body)}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.assert_times_out(trickle(head, body, 0.25), lambda c: c.serve(NS, "k"))

    def test_a_server_that_never_answers(self) -> None:
        self.assert_times_out(lambda c: time.sleep(60), lambda c: c.list(NS))

    def test_a_tls_handshake_trickled_past_the_timeout(self) -> None:
        # a server that reads the ClientHello, then sends the head of a 16 KiB handshake record
        # and its bytes one every 0.25 s (about an hour in all): the deadline covers the handshake
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        self.addCleanup(srv.close)

        def serve() -> None:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    conn.sendall(b"\x16\x03\x03\x40\x00")
                    for _ in range(16384):
                        time.sleep(0.25)
                        conn.sendall(b"\x00")
                except OSError:
                    return

        threading.Thread(target=serve, daemon=True).start()
        url = f"https://127.0.0.1:{srv.getsockname()[1]}"
        c = Client(url, "svc_live_" + "k" * 40, max_retries=0, timeout=1)
        self.addCleanup(c.close)
        started = time.monotonic()
        with self.assertRaises(SvcError) as e:
            c.list(NS)
        self.assertEqual((e.exception.code, e.exception.detail), ("engine_unreachable", f"The service at {url} did not answer within 1 s."))
        self.assertLess(time.monotonic() - started, 30, "the client gave up long before the trickle ended")


if __name__ == "__main__":
    unittest.main()
