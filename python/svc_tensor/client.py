"""A numpy client of the svc-tensor gateway (docs/api.md, data plane).

Arrays travel as application/octet-stream both ways (dtype and shape from the array on a
put; an ndarray of the stored dtype and shape from a serve). Errors are SvcError carrying
the server's `code`, `detail` and `request_id`. A 429, a 502 and a 503 that says when to try
again (never the monthly quota) are retried with exponential backoff that honours
Retry-After, at most `max_retries` times and never waiting longer than `max_backoff`
seconds; every write carries an Idempotency-Key, the same on its retries, so a retried write
is applied at most once. numpy is the only dependency; HTTP is the standard library's, one
keep-alive connection per client. `timeout` bounds each exchange as a whole (connecting,
sending, the answer's headers and body), and an answer is read in chunks up to what its
request can produce: a malformed, oversized or late answer is an SvcError of one sentence.
A float32 or float64 put of `local_compress_bytes` or more (64 MiB by default) is compressed
here with the engine's TT-SVD (svc_tensor.ttsvd) and sent as TT cores with put_cores, so that
a tensor past the service's upload limit can be stored.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import functools
import http.client
import io
import json
import math
import random
import re
import secrets
import ssl
import threading
import time
import urllib.parse
from typing import Any, Callable, Iterable

import numpy as np

from . import ttsvd

__all__ = ["Client", "SvcError"]

NAMESPACE = re.compile(r"[A-Za-z0-9_-]{1,255}")
KEY = re.compile(r"[A-Za-z0-9_.:/@=-]{1,512}")
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")
CODECS = ("auto", "tt", "pred", "lossless")
METRICS = ("cosine", "dot", "l2")
# the store's dtypes by numpy's names (bfloat16 where ml_dtypes provides it)
DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool")
METADATA_HEADER_MAX = 8 * 1024
# the server's shape rules (lib/fields.ts): 1 to 32 dimensions of 1 to 2**31 - 1 each
MAX_DIMS = 32
MAX_DIM = 2**31 - 1
# what the client reads of an answer: an error body is one sentence; a JSON answer (and a
# bytes entry's serve) up to max_answer_bytes; a dense serve exactly what its headers imply
ERROR_ANSWER_MAX = 1024 * 1024
ANSWER_MAX_DEFAULT = 256 * 1024 * 1024
# a float32/float64 put of this many bytes or more is TT-compressed here (False: never)
LOCAL_COMPRESS_BYTES_DEFAULT = ttsvd.DEFAULT_LOCAL_COMPRESS_BYTES
# lib/schemas.ts: the largest max_rank the engine computes
MAX_RANK_LIMIT = 1024
READ_CHUNK = 1024 * 1024
_CODE_OF_STATUS = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 409: "version_conflict",
                   413: "payload_too_large", 415: "unsupported_media_type", 422: "idempotency_key_reused", 429: "rate_limited",
                   501: "gpu_unavailable", 502: "engine_unreachable", 503: "overloaded"}


class SvcError(Exception):
    """An answer that is not 2xx, a request the client refused to send (`code`
    "validation_error", nothing sent), or a service that could not be reached."""

    def __init__(self, code: str, detail: str, request_id: str | None = None, status: int | None = None,
                 retry_after: float | None = None, field: str | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.request_id = request_id
        self.status = status
        self.retry_after = retry_after
        self.field = field

    def __repr__(self) -> str:
        return f"SvcError(code={self.code!r}, detail={self.detail!r}, request_id={self.request_id!r}, status={self.status!r})"


class _TooLarge(SvcError):
    """An answer past the bytes the client reads for its request."""


def _invalid(field: str, detail: str) -> SvcError:
    return SvcError("validation_error", detail, field=field)


def _shape_problem(shape: tuple[int, ...], what: str) -> str | None:
    """The server's shape rules as a sentence about `what`, or None when the shape keeps them."""
    if not shape:
        return f"{what} must have at least one dimension."
    if len(shape) > MAX_DIMS:
        return f"{what} must have at most {MAX_DIMS} dimensions (it has {len(shape)})."
    if 0 in shape:
        return f"{what} must not be empty (its shape is {list(shape)}); the store keeps no zero-size arrays."
    if max(shape) > MAX_DIM:
        return f"{what} must have at most {MAX_DIM} elements along each dimension."
    return None


class _DeadlineReader(io.RawIOBase):
    """The socket's bytes for a response, each receive waiting only until the exchange's deadline."""

    def __init__(self, sock: Any, deadline: Callable[[], float]) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._sock.fileno()

    def readinto(self, b: Any) -> int:
        left = self._deadline() - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline passed")
        self._sock.settimeout(left)
        return self._sock.recv_into(b)


class _DeadlineResponse(http.client.HTTPResponse):
    def __init__(self, sock: Any, *args: Any, deadline: Callable[[], float], **kw: Any) -> None:
        super().__init__(sock, *args, **kw)
        self.fp.close()  # the socket's own reader, unused: nothing was read from it
        self.fp = io.BufferedReader(_DeadlineReader(sock, deadline))


class _Deadline:
    """An HTTP connection whose every step (connect, each send, each receive of the answer's
    headers and body) waits only until `deadline` (time.monotonic()): `timeout` bounds the
    exchange as a whole, not each socket operation."""

    deadline = math.inf

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)  # type: ignore[call-arg]
        self.response_class = functools.partial(_DeadlineResponse, deadline=lambda: self.deadline)

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline passed")
        return left

    def connect(self) -> None:
        self.timeout = self._left()
        super().connect()  # type: ignore[misc]
        self._left()

    def send(self, data: Any) -> None:
        if self.sock is None:  # type: ignore[attr-defined]
            self.connect()
        self.sock.settimeout(self._left())  # type: ignore[attr-defined]
        super().send(data)  # type: ignore[misc]


class _HTTPConnection(_Deadline, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_Deadline, http.client.HTTPSConnection):
    # The TLS handshake runs within the socket's timeout, which connect() set to what is left of
    # the deadline; the ssl module bounds the whole handshake by it, not each receive.
    pass


def parse_retry_after(v: str | None, now: float | None = None) -> float | None:
    """Seconds of a Retry-After header (delta seconds or an HTTP date), or None."""
    if not v:
        return None
    v = v.strip()
    if re.fullmatch(r"\d+(\.\d+)?", v):
        return float(v)
    try:
        t = email.utils.parsedate_to_datetime(v).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, t - (time.time() if now is None else now))


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON")


def _dumps(v: Any) -> str:
    try:
        return json.dumps(v, default=_json_default, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise _invalid("json", f"A value cannot be sent as JSON: {e}.") from None
    except RecursionError:
        raise _invalid("json", "A value cannot be sent as JSON: it is nested too deeply.") from None


def _dtype_name(dt: np.dtype) -> str | None:
    name = dt.name
    return name if name in DTYPES else None


def _np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        try:
            import ml_dtypes  # noqa: PLC0415 - optional: numpy has no bfloat16 of its own
        except ImportError:
            raise SvcError("unsupported_dtype", "The entry is bfloat16, which needs the ml_dtypes package to become an ndarray; serve it with dtype='float32'.") from None
        return np.dtype(ml_dtypes.bfloat16)
    if name == "bool":
        return np.dtype(np.bool_)
    return np.dtype(name).newbyteorder("<")


class Client:
    """`Client(base_url, api_key)`: the store's data plane over HTTP, arrays as ndarrays."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 120.0, max_retries: int = 3,
                 backoff: float = 0.25, max_backoff: float = 30.0, max_answer_bytes: int = ANSWER_MAX_DEFAULT,
                 local_compress_bytes: int | bool = LOCAL_COMPRESS_BYTES_DEFAULT,
                 ssl_context: ssl.SSLContext | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not isinstance(base_url, str):
            raise _invalid("base_url", "base_url must be a string such as http://127.0.0.1:8080.")
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname or u.query or u.fragment:
            raise _invalid("base_url", "base_url must be an http or https address such as http://127.0.0.1:8080.")
        if not isinstance(api_key, str) or not api_key or not re.fullmatch(r"[\x21-\x7e]+", api_key):
            raise _invalid("api_key", "api_key must be a non-empty string of visible ASCII characters.")
        for name, v, lo, hi in (("timeout", timeout, 0.001, 86400), ("backoff", backoff, 0, 60), ("max_backoff", max_backoff, 0, 3600)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
                raise _invalid(name, f"{name} must be a number from {lo} to {hi} seconds.")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or not 0 <= max_retries <= 20:
            raise _invalid("max_retries", "max_retries must be an integer from 0 to 20.")
        if isinstance(max_answer_bytes, bool) or not isinstance(max_answer_bytes, int) or not 1024 <= max_answer_bytes <= 2**48:
            raise _invalid("max_answer_bytes", "max_answer_bytes must be an integer from 1024 to 2**48.")
        if local_compress_bytes is not False and (isinstance(local_compress_bytes, bool) or not isinstance(local_compress_bytes, (int, np.integer))
                                                  or local_compress_bytes < 0):
            raise _invalid("local_compress_bytes", "local_compress_bytes must be an integer of at least 0 (bytes), or False to send every put as it is.")
        if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
            raise _invalid("ssl_context", "ssl_context must be an ssl.SSLContext, such as ssl.create_default_context(cafile=...).")
        if ssl_context is not None and u.scheme != "https":
            raise _invalid("ssl_context", "ssl_context applies to an https base_url only.")
        self._ssl_context = ssl_context
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")
        self._api_key = api_key
        self._timeout = float(timeout)
        self._max_retries = max_retries
        self._backoff = float(backoff)
        self._max_backoff = float(max_backoff)
        self._max_answer = max_answer_bytes
        self._local_from: int | None = None if local_compress_bytes is False else int(local_compress_bytes)
        self._sleep = sleep
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self.last_response: dict | None = None

    # ---- plumbing ---------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._scheme == "https":
                self._conn = _HTTPSConnection(self._host, self._port, timeout=self._timeout, context=self._ssl_context)
            else:
                self._conn = _HTTPConnection(self._host, self._port, timeout=self._timeout)
        return self._conn

    def _once(self, method: str, path: str, body: bytes | None, headers: dict[str, str],
              limit: Callable[[int, dict[str, str]], int]) -> tuple[int, dict[str, str], bytes]:
        # `timeout` bounds the whole exchange: connecting, sending, the answer's headers and body
        deadline = time.monotonic() + self._timeout
        # a kept-alive connection the server closed meanwhile fails at once: one fresh try
        for fresh in (False, True):
            conn = self._connection()
            conn.deadline = deadline  # type: ignore[attr-defined]
            reused = conn.sock is not None
            try:
                conn.request(method, self._prefix + path, body=body, headers=headers)
                res = conn.getresponse()
                hdrs = {k.lower(): v for k, v in res.getheaders()}
                data = self._read_answer(res, limit(res.status, hdrs))
                if res.will_close:
                    self.close_connection()
                return res.status, hdrs, data
            except _TooLarge as e:
                self.close_connection()
                if e.status is not None and e.status >= 400:
                    # an error answer too large to read: its status still decides (a 429 or 503 is
                    # retried as any other), with the status's sentence
                    return e.status, hdrs, b""
                raise
            except SvcError:
                self.close_connection()
                raise
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                self.close_connection()
                if reused and not fresh:
                    continue
                raise SvcError("engine_unreachable", f"The service at {self._base()} closed the connection ({type(e).__name__}).") from None
            except TimeoutError:
                self.close_connection()
                raise SvcError("engine_unreachable", f"The service at {self._base()} did not answer within {self._timeout:g} s.") from None
            except http.client.IncompleteRead:
                self.close_connection()
                raise SvcError("engine_unreachable", f"The service at {self._base()} closed the connection before the end of its answer.") from None
            except ssl.SSLCertVerificationError as e:
                self.close_connection()
                raise SvcError("engine_unreachable", _untrusted(self._base(), e)) from None
            except (OSError, http.client.HTTPException) as e:
                self.close_connection()
                raise SvcError("engine_unreachable", f"The service at {self._base()} could not be reached ({type(e).__name__}).") from None
        raise AssertionError("unreachable")

    def _read_answer(self, res: http.client.HTTPResponse, limit: int) -> bytearray:
        """The answer's body, read in chunks and refused past `limit` bytes: a Content-Length is
        never allocated before its bytes arrive."""
        declared = res.length
        if declared is not None and declared > limit:
            raise _TooLarge("internal", f"The service announced an answer of {declared} bytes, more than the {limit} bytes the client reads for this request.",
                            res.headers.get("x-request-id"), res.status)
        buf = bytearray()
        while True:
            chunk = res.read(min(READ_CHUNK, limit + 1 - len(buf)))
            if not chunk:
                break
            buf += chunk
            if len(buf) > limit:
                raise _TooLarge("internal", f"The service answered more than the {limit} bytes the client reads for this request.",
                                res.headers.get("x-request-id"), res.status)
        if declared is not None and len(buf) != declared:
            raise http.client.IncompleteRead(bytes(buf[:0]), declared - len(buf))
        return buf

    def _limit(self, status: int, headers: dict[str, str]) -> int:
        """The most bytes an answer of a JSON route can hold."""
        return ERROR_ANSWER_MAX if status >= 300 else self._max_answer

    def close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _base(self) -> str:
        port = f":{self._port}" if self._port else ""
        return f"{self._scheme}://{self._host}{port}"

    def _error(self, status: int, headers: dict[str, str], body: bytes) -> SvcError:
        detail = f"The service answered HTTP {status}."
        code = "internal"
        request_id = headers.get("x-request-id")
        try:
            b = json.loads(body.decode("utf-8"))
            if isinstance(b, dict):
                if isinstance(b.get("detail"), str):
                    detail = b["detail"]
                if isinstance(b.get("code"), str):
                    code = b["code"]
                if isinstance(b.get("request_id"), str):
                    request_id = b["request_id"]
        except (ValueError, UnicodeDecodeError, RecursionError):
            pass  # not an error body: the status's sentence and code
        if code == "internal" and status != 500:
            code = _CODE_OF_STATUS.get(status, "internal")
        return SvcError(code, detail, request_id, status, parse_retry_after(headers.get("retry-after")))

    def _call(self, method: str, path: str, *, query: dict | None = None, json_body: Any = None, raw: bytes | None = None,
              headers: dict[str, str] | None = None, octet: bool = False, write: bool = False,
              idempotency_key: str | None = None, limit: Callable[[int, dict[str, str]], int] | None = None) -> tuple[dict[str, str], bytearray]:
        h = {"X-Api-Key": self._api_key, "Accept": "application/octet-stream" if octet else "application/json",
             "User-Agent": "svc-tensor-python"}
        h.update(headers or {})
        body: bytes | None = None
        if raw is not None:
            h["Content-Type"] = "application/octet-stream"
            body = raw
        elif json_body is not None:
            h["Content-Type"] = "application/json"
            body = _dumps(json_body).encode("utf-8")
        if write:
            # one key for every attempt: a retry of a write that was in fact applied gets the stored answer back
            h["Idempotency-Key"] = idempotency_key or base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        if query:
            path += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        attempt = 0
        with self._lock:
            while True:
                attempt += 1
                status, rh, data = self._once(method, path, body, h, limit or self._limit)
                self.last_response = {
                    "status": status, "request_id": rh.get("x-request-id"), "cus": _float_or_none(rh.get("x-svc-cus")),
                    "retry_after": parse_retry_after(rh.get("retry-after")), "headers": rh, "attempts": attempt,
                }
                if status < 400:
                    return rh, data
                err = self._error(status, rh, data)
                retriable = status in (429, 502) or (status == 503 and (err.code == "overloaded" or ("retry-after" in rh and err.code != "quota_exhausted")))
                if retriable and attempt <= self._max_retries:
                    ra = parse_retry_after(rh.get("retry-after"))
                    expo = min(self._max_backoff, self._backoff * 2 ** (attempt - 1))
                    # our own backoff: equal jitter in [expo/2, expo]; a server's Retry-After as given
                    wait = ra if ra is not None else expo / 2 + random.random() * expo / 2
                    if wait <= self._max_backoff:
                        self._sleep(wait)
                        continue
                raise err

    def _json(self, *args: Any, **kw: Any) -> dict:
        _, data = self._call(*args, **kw)
        b = self._loads(data, "The service answered with a body that is not JSON.")
        if not isinstance(b, dict):
            raise self._bad_answer("The service answered with JSON that is not an object.")
        return b

    def _bad_answer(self, detail: str) -> SvcError:
        """A 2xx answer the client cannot use: code "internal", with the answer's status and request id."""
        last = self.last_response or {}
        return SvcError("internal", detail, last.get("request_id"), last.get("status"))

    def _loads(self, data: bytes | bytearray, detail: str) -> Any:
        try:
            return json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise self._bad_answer(detail) from None
        except RecursionError:
            raise self._bad_answer("The service answered with JSON nested too deeply to read.") from None

    # ---- arguments ---------------------------------------------------------------------

    @staticmethod
    def _ns(v: Any, field: str = "namespace") -> str:
        if not isinstance(v, str) or not NAMESPACE.fullmatch(v):
            raise _invalid(field, f"{field} must be 1-255 characters of A-Z a-z 0-9 - _.")
        return v

    @staticmethod
    def _key(v: Any, field: str = "key") -> str:
        if not isinstance(v, str) or not KEY.fullmatch(v) or any(s in ("", ".", "..") for s in v.split("/")):
            raise _invalid(field, f"{field} must be 1-512 characters of A-Z a-z 0-9 - _ . : / @ = with no empty, '.' or '..' segment.")
        return v

    @staticmethod
    def _int(v: Any, field: str, lo: int, hi: int | None = None) -> int | None:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo or (hi is not None and v > hi):
            raise _invalid(field, f"{field} must be an integer of at least {lo}" + (f" and at most {hi}." if hi is not None else "."))
        return int(v)

    @staticmethod
    def _num(v: Any, field: str, lo: float, hi: float | None = None, hi_open: bool = False) -> float | None:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(float(v)):
            raise _invalid(field, f"{field} must be a finite number.")
        f = float(v)
        if f < lo or (hi is not None and (f >= hi if hi_open else f > hi)):
            raise _invalid(field, f"{field} must be at least {lo:g}" + (f" and below {hi:g}." if hi is not None else "."))
        return f

    @staticmethod
    def _metadata(v: Any) -> dict | None:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise _invalid("metadata", "metadata must be a dict (a JSON object).")
        if len(_dumps(v).encode("utf-8")) > 64 * 1024:
            raise _invalid("metadata", "metadata must be at most 64 KiB as JSON.")
        return v

    @staticmethod
    def _idem(v: Any) -> str | None:
        if v is None:
            return None
        if not isinstance(v, str) or not IDEMPOTENCY_KEY.fullmatch(v):
            raise _invalid("idempotency_key", "idempotency_key must be 1-255 visible ASCII characters.")
        return v

    @staticmethod
    def _metric(v: Any) -> str | None:
        if v is not None and v not in METRICS:
            raise _invalid("metric", "metric must be one of cosine, dot, l2.")
        return v

    @staticmethod
    def _filter(v: Any) -> dict | None:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise _invalid("filter", "filter must be a dict (a JSON object).")
        _dumps(v)
        return v

    # ---- data plane --------------------------------------------------------------------

    def put(self, ns: str, key: str, array: Any, *, tolerance: float | None = None, max_abs_error: float | None = None,
            metadata: dict | None = None, codec: str | None = None, max_rank: int | None = None,
            if_version: int | None = None, idempotency_key: str | None = None) -> dict:
        """Stores an array (dtype and shape from it) or `bytes`; returns the put answer. A float32
        or float64 array of `local_compress_bytes` or more is TT-compressed here under the put's
        bounds and sent as cores with put_cores, where TT shrinks it at least 1.2 times."""
        self._ns(ns)
        self._key(key)
        tolerance = self._num(tolerance, "tolerance", 0, 1, hi_open=True)
        max_abs_error = self._num(max_abs_error, "max_abs_error", 0)
        if codec is not None and codec not in CODECS:
            raise _invalid("codec", "codec must be one of auto, tt, pred, lossless.")
        max_rank = self._int(max_rank, "max_rank", 1, MAX_RANK_LIMIT)
        if_version = self._int(if_version, "if_version", 0)
        metadata = self._metadata(metadata)
        idem = self._idem(idempotency_key)
        tried_tt = False
        if isinstance(array, (bytes, bytearray, memoryview)):
            dtype, shape, payload = "bytes", None, bytes(array)
        else:
            if not isinstance(array, np.ndarray):
                raise _invalid("array", "array must be a numpy ndarray or bytes.")
            dtype = _dtype_name(array.dtype)
            if dtype is None:
                raise _invalid("array", f"The array's dtype {array.dtype} is not one the store keeps ({', '.join(DTYPES)}).")
            problem = _shape_problem(array.shape, "array")
            if problem:
                raise _invalid("array", problem)
            if array.dtype.kind == "f" and array.size and not np.isfinite(array).all():
                raise _invalid("array", "array contains NaN or infinite values; floating data must be finite.")
            shape = [int(d) for d in array.shape]
            if dtype in ("float32", "float64") and self._local_from is not None \
                    and array.nbytes >= max(self._local_from, ttsvd.LOCAL_MIN_COMPRESS_BYTES):
                tried_tt, local = self._put_tt(ns, key, array, dtype, shape, tolerance, max_abs_error, codec, max_rank,
                                               if_version, metadata, idem)
                if local is not None:
                    return local
            le = array.dtype if array.dtype.itemsize == 1 or dtype == "bfloat16" else array.dtype.newbyteorder("<")
            payload = np.ascontiguousarray(array, dtype=le).tobytes()
        fields = {"namespace": ns, "key": key, "dtype": dtype, "shape": shape, "tolerance": tolerance,
                  "max_abs_error": max_abs_error, "codec": codec, "max_rank": max_rank, "if_version": if_version}
        meta_text = None
        if metadata is not None:
            # header values must be Latin-1: everything past ASCII is escaped, so that any metadata travels
            meta_text = re.sub(r"[\x7f-\uffff]", lambda m: f"\\u{ord(m.group(0)):04x}", _dumps(metadata))
        try:
            if meta_text is not None and len(meta_text) > METADATA_HEADER_MAX:
                # servers cap request headers; long metadata goes with the JSON form
                body = {k: v for k, v in fields.items() if v is not None}
                body.update(metadata=metadata, data_b64=base64.b64encode(payload).decode("ascii"))
                return self._json("POST", "/v1/put", json_body=body, write=True, idempotency_key=idem)
            query = {k: v for k, v in fields.items() if v is not None}
            if shape is not None:
                query["shape"] = ",".join(str(d) for d in shape)
            headers = {"X-SVC-Metadata": meta_text} if meta_text is not None else {}
            return self._json("POST", "/v1/put", query=query, raw=payload, headers=headers, write=True, idempotency_key=idem)
        except SvcError as e:
            if e.code != "payload_too_large" or dtype == "bytes":
                raise
            tt_allowed = _tt_allowed(codec, tolerance, max_abs_error)
            raise self._past_the_limit(e, len(payload), dtype, tried_tt, tt_allowed) from None

    def _past_the_limit(self, e: SvcError, nbytes: int, dtype: str, tried_tt: bool, tt_allowed: bool) -> SvcError:
        """The 413 of a dense put as one sentence: the server's, and the ways to store the tensor."""
        detail = e.detail[:-1] if e.detail.endswith(".") else e.detail
        text = f"The tensor of {nbytes} bytes is past the upload limit"
        if tried_tt:
            text += f" and TT does not compress it within the put's bounds at a ratio of {ttsvd.LOCAL_MIN_RATIO:g}"
        text += f": {detail}; raise SVC_ENGINE_MAX_UPLOAD_BYTES on the engine and the gateway"
        if dtype in ("float32", "float64"):
            if tt_allowed and not tried_tt and (self._local_from is None or nbytes < max(self._local_from, ttsvd.LOCAL_MIN_COMPRESS_BYTES)):
                text += f", or pass local_compress_bytes of at most {nbytes} to this client to send it as TT cores"
            text += ", or put it with the Node client (createClient) or `svc put`, which can compress it with the prediction codec"
        return SvcError("payload_too_large", text + ".", e.request_id, e.status, e.retry_after)

    def _put_tt(self, ns: str, key: str, array: np.ndarray, dtype: str, shape: list[int], tolerance: float | None,
                max_abs_error: float | None, codec: str | None, max_rank: int | None, if_version: int | None,
                metadata: dict | None, idem: str | None) -> tuple[bool, dict | None]:
        """A large float32/float64 put compressed here as the Node client does it (lib/client-core.ts,
        lib/client-compress.ts): TT-SVD under the put's bounds, decoded and measured against the
        array, and stored with put_cores. Returns whether TT was tried, and the put answer with the
        verdict, relative_error and max_abs_error measured here in place of put_cores' (which records
        a given TT as compressed, error 0); None where no TT meets the bounds at a ratio of 1.2 (the
        array then goes as it is)."""
        if not _tt_allowed(codec, tolerance, max_abs_error):
            # the prediction codec's (exact or alone): the engine encodes it from the values
            return False, None
        # a tolerance applies where given, or by default where no max_abs_error was given either
        tol = tolerance if tolerance is not None else (ttsvd.LOCAL_DEFAULT_TOLERANCE if max_abs_error is None else None)
        floor = ttsvd.tt_floor(array.dtype)
        if codec == "tt" and tol is not None and tol < floor:
            raise _invalid("tolerance", f"tolerance {tol:g} is below the TT engine's floor of {floor:g} for {dtype} data; use codec auto or pred.")
        tt = ttsvd.compress_locally(array, tol, max_abs_error, max_rank)
        if tt is None:
            return True, None
        cores = [{"shape": list(c.shape), "dtype": dtype,
                  "data_b64": base64.b64encode(np.ascontiguousarray(c, dtype=c.dtype.newbyteorder("<")).tobytes()).decode("ascii")}
                 for c in tt.cores]
        body: dict[str, Any] = {"namespace": ns, "key": key, "cores": cores, "shape": shape}
        if metadata is not None:
            body["metadata"] = metadata
        if if_version is not None:
            body["if_version"] = if_version
        try:
            r = self._json("POST", "/v1/put_cores", json_body=body, write=True, idempotency_key=idem)
        except SvcError as e:
            if e.code != "payload_too_large":
                raise
            stored = tt.nbytes
            detail = e.detail[:-1] if e.detail.endswith(".") else e.detail
            raise SvcError("payload_too_large",
                           f"Even compressed to {stored} bytes of TT cores (ratio {array.nbytes / stored:.1f}), the tensor is past the upload limit: "
                           f"{detail}; raise SVC_ENGINE_MAX_UPLOAD_BYTES on the engine and the gateway, or allow a larger tolerance or a smaller max_rank.",
                           e.request_id, e.status, e.retry_after) from None
        return True, {**r, "verdict": tt.verdict, "compressed": True, "relative_error": tt.relative_error, "max_abs_error": tt.max_abs_error}

    def get(self, ns: str, key: str, version: int | None = None) -> dict:
        """Metadata and fingerprint of an entry, without its data."""
        self._ns(ns)
        self._key(key)
        version = self._int(version, "version", 1)
        return self._json("GET", f"/v1/get/{ns}/{_enc_path(key)}", query={"version": version})

    def serve(self, ns: str, key: str, slice: Iterable[tuple[int, int]] | None = None, version: int | None = None,  # noqa: A002 - the API's name
              dtype: str | None = None) -> Any:
        """The entry's data as an ndarray of its dtype and shape (or of `slice`); `bytes`
        for a bytes entry."""
        self._ns(ns)
        self._key(key)
        version = self._int(version, "version", 1)
        body: dict[str, Any] = {"namespace": ns, "key": key, "device": "cpu"}
        if version is not None:
            body["version"] = version
        if slice is not None:
            try:
                pairs = [list(p) for p in slice]
            except TypeError:
                raise _invalid("slice", "slice must be a list of (start, stop) pairs, one per dimension.") from None
            if not 1 <= len(pairs) <= MAX_DIMS:
                raise _invalid("slice", f"slice must have one (start, stop) pair per dimension, 1 to {MAX_DIMS} of them.")
            for p in pairs:
                if len(p) != 2 or any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 0 for x in p) or p[0] >= p[1]:
                    raise _invalid("slice", "slice must be a list of (start, stop) pairs of integers with 0 <= start < stop.")
            body["slice"] = [[int(a), int(b)] for a, b in pairs]
        if dtype is not None:
            if dtype not in ("float32", "float64", "float16", "bfloat16"):
                raise _invalid("dtype", "dtype must be one of float32, float64, float16, bfloat16.")
            body["dtype"] = dtype

        def limit(status: int, h: dict[str, str]) -> int:
            # a raw dense answer is exactly as long as its X-SVC-Dtype and X-SVC-Shape say
            if status >= 300:
                return ERROR_ANSWER_MAX
            if not h.get("content-type", "").startswith("application/octet-stream") or h.get("x-svc-dtype") == "bytes":
                return self._max_answer
            shape = _answer_shape(h.get("x-svc-dtype", ""), h.get("x-svc-shape", ""))
            if shape is None:
                raise SvcError("internal", _BAD_SERVE_HEADERS, h.get("x-request-id"), status)
            return math.prod(shape) * _itemsize(h["x-svc-dtype"])

        headers, data = self._call("POST", "/v1/serve", json_body=body, octet=True, limit=limit)
        if headers.get("content-type", "").startswith("application/octet-stream"):
            out_dtype = headers.get("x-svc-dtype", "")
            shape_text = headers.get("x-svc-shape", "")
        else:
            b = self._loads(data, _BAD_SERVE_JSON)
            if not isinstance(b, dict) or not isinstance(b.get("dtype"), str) or not isinstance(b.get("data_b64"), str) \
                    or not isinstance(b.get("shape") or [], list):
                raise self._bad_answer(_BAD_SERVE_JSON)
            out_dtype, shape_text = b["dtype"], ",".join(str(d) for d in b.get("shape") or [])
            try:
                data = bytearray(base64.b64decode(b["data_b64"], validate=True))
            except (binascii.Error, ValueError):
                raise self._bad_answer(_BAD_SERVE_JSON) from None
        if out_dtype == "bytes":
            return bytes(data)
        shape = _answer_shape(out_dtype, shape_text)
        if shape is None:
            raise self._bad_answer(_BAD_SERVE_HEADERS)
        dt = _np_dtype(out_dtype)
        if math.prod(shape) * dt.itemsize != len(data):
            raise self._bad_answer(f"The service answered {len(data)} bytes for shape {list(shape)} of {out_dtype}.")
        # the bytearray read from the socket, so that the caller gets a writable array without a copy
        arr = np.frombuffer(data, dtype=dt).reshape(shape)
        return arr.astype(arr.dtype.newbyteorder("="), copy=False) if arr.dtype.byteorder not in ("=", "|") else arr

    def list(self, ns: str, prefix: str | None = None, limit: int | None = None, offset: int | None = None) -> dict:  # noqa: A003
        self._ns(ns)
        if prefix is not None and not isinstance(prefix, str):
            raise _invalid("prefix", "prefix must be a string.")
        limit = self._int(limit, "limit", 1, 1000)
        offset = self._int(offset, "offset", 0)
        return self._json("GET", f"/v1/list/{ns}", query={"prefix": prefix or None, "limit": limit, "offset": offset})

    def search(self, ns: str, filter: dict | None = None, prefix: str | None = None, limit: int | None = None,  # noqa: A002
               offset: int | None = None) -> dict:
        self._ns(ns)
        f = self._filter(filter)
        if prefix is not None and not isinstance(prefix, str):
            raise _invalid("prefix", "prefix must be a string.")
        body = {"namespace": ns, "filter": f if f is not None else {}, "prefix": prefix or None,
                "limit": self._int(limit, "limit", 1, 1000), "offset": self._int(offset, "offset", 0)}
        return self._json("POST", "/v1/search", json_body={k: v for k, v in body.items() if v is not None})

    def topk(self, ns: str, key: str | None = None, vector: Any = None, k: int = 10, metric: str | None = None,
             filter: dict | None = None, version: int | None = None, include_self: bool | None = None) -> dict:  # noqa: A002
        """The k entries nearest the entry `key`, or an external `vector` (an ndarray of
        float32 or float64; its shape must be the entries' shape)."""
        self._ns(ns)
        if (key is None) == (vector is None):
            raise _invalid("key", "Give exactly one of key and vector.")
        body: dict[str, Any] = {"namespace": ns, "k": self._int(k, "k", 1, 1000), "metric": self._metric(metric),
                                "filter": self._filter(filter)}
        if key is not None:
            body.update(key=self._key(key), version=self._int(version, "version", 1))
            if include_self is not None:
                if not isinstance(include_self, bool):
                    raise _invalid("include_self", "include_self must be True or False.")
                body["include_self"] = include_self
            return self._json("POST", "/v1/query/topk", json_body={k2: v for k2, v in body.items() if v is not None})
        if version is not None or include_self is not None:
            raise _invalid("version", "version and include_self apply to a query by key, not by vector.")
        v = np.asarray(vector)
        if v.dtype.kind not in "fiu" or v.ndim == 0 or v.size == 0:
            raise _invalid("vector", "vector must be a non-empty array of numbers.")
        problem = _shape_problem(v.shape, "vector")
        if problem:
            raise _invalid("vector", problem)
        if v.dtype != np.float32:
            v = v.astype(np.float64)
        if not np.isfinite(v).all():
            raise _invalid("vector", "vector contains NaN or infinite values.")
        body.update(vector_b64=base64.b64encode(np.ascontiguousarray(v, dtype=v.dtype.newbyteorder("<")).tobytes()).decode("ascii"),
                    dtype=v.dtype.name, shape=[int(d) for d in v.shape])
        return self._json("POST", "/v1/query/vector", json_body={k2: x for k2, x in body.items() if x is not None})

    def similarity(self, ns: str, a: str, b: str, namespace_b: str | None = None, version_a: int | None = None,
                   version_b: int | None = None, metric: str | None = None) -> dict:
        self._ns(ns)
        body = {"namespace": ns, "a": self._key(a, "a"), "b": self._key(b, "b"),
                "namespace_b": self._ns(namespace_b, "namespace_b") if namespace_b is not None else None,
                "version_a": self._int(version_a, "version_a", 1), "version_b": self._int(version_b, "version_b", 1),
                "metric": self._metric(metric)}
        return self._json("POST", "/v1/query/similarity", json_body={k: v for k, v in body.items() if v is not None})

    def delete(self, ns: str, key: str, idempotency_key: str | None = None) -> dict:
        self._ns(ns)
        self._key(key)
        return self._json("DELETE", f"/v1/delete/{ns}/{_enc_path(key)}", write=True, idempotency_key=self._idem(idempotency_key))


def _tt_allowed(codec: str | None, tolerance: float | None, max_abs_error: float | None) -> bool:
    """Whether a put with these options may be TT: codec auto or tt, and no exact bound (codec
    lossless, a tolerance or max_abs_error of 0 and codec pred are the prediction codec's)."""
    return (codec or "auto") in ("auto", "tt") and tolerance != 0 and max_abs_error != 0


def _untrusted(base: str, e: ssl.SSLCertVerificationError) -> str:
    """The sentence for a TLS certificate this client does not trust, and the way out."""
    why = (e.verify_message or e.reason or "certificate verify failed").rstrip(".")
    if e.verify_code in (62, 64):  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
        return f"The TLS certificate of {base} does not name its host ({why}): use in base_url a host name that the certificate names."
    if e.verify_code in (9, 10):  # not yet valid, expired
        return f"The TLS certificate of {base} is out of its validity dates ({why}): the server needs a current certificate."
    return (f"The TLS certificate of {base} is not trusted ({why}): pass ssl_context=ssl.create_default_context(cafile=...) "
            "with the PEM file of the CA that signed it, or set SSL_CERT_FILE to it.")


_BAD_SERVE_JSON = "The service answered a serve with a body that is not its JSON form."
_BAD_SERVE_HEADERS = "The service answered a serve without valid X-SVC-Dtype and X-SVC-Shape headers."


def _itemsize(name: str) -> int:
    return 2 if name == "bfloat16" else np.dtype(name).itemsize


def _answer_shape(dtype: str, shape_text: str) -> tuple[int, ...] | None:
    """The shape of a dense serve answer, or None when its dtype or shape break the server's rules."""
    if dtype not in DTYPES or not re.fullmatch(r"\d{1,10}(,\d{1,10})*", shape_text):
        return None
    shape = tuple(int(d) for d in shape_text.split(","))
    return None if _shape_problem(shape, "shape") else shape


def _enc_path(key: str) -> str:
    return "/".join(urllib.parse.quote(s, safe="") for s in key.split("/"))


def _float_or_none(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None
