"""The numpy client over TLS, against a local HTTPS server whose certificate a CA of the test's
own signed (made with the openssl command; the tests skip where it is missing): a certificate
the client does not trust, one that names another host, and one that has expired are refused
with a sentence that says what to do; `ssl_context` with the CA makes the exchange work; a bad
`ssl_context` is refused before anything is sent."""

from __future__ import annotations

import http.server
import json
import shutil
import ssl
import subprocess
import tempfile
import threading
import unittest

from svc_tensor import Client, SvcError

NS = "py"
KEY = "svc_live_" + "k" * 43
LIST = {"namespace": NS, "keys": [], "total": 0, "limit": 1000, "offset": 0, "next_offset": None}


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=120)


def _make_certs(d: str) -> None:
    """ca.pem (a CA), and three leaf certificates it signed: srv (localhost, valid), old
    (localhost, expired) and their keys."""
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{d}/ca.key",
             "-out", f"{d}/ca.pem", "-days", "2", "-subj", "/CN=svc test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    ext = f"{d}/leaf.ext"
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid\n")
    for name in ("srv", "old"):
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{d}/{name}.key",
                 "-out", f"{d}/{name}.csr", "-subj", "/CN=localhost")
    _openssl("x509", "-req", "-in", f"{d}/srv.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key", "-CAcreateserial",
             "-out", f"{d}/srv.pem", "-days", "2", "-extfile", ext)
    # a certificate valid for one day in 2020: `openssl ca` takes the dates (x509 -req does not before OpenSSL 3.4)
    with open(f"{d}/ca.cnf", "w") as f:
        f.write(f"[ca]\ndefault_ca = c\n[c]\ndatabase = {d}/index.txt\nnew_certs_dir = {d}\nserial = {d}/serial\n"
                "default_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n")
    open(f"{d}/index.txt", "w").close()
    with open(f"{d}/serial", "w") as f:
        f.write("1000\n")
    _openssl("ca", "-batch", "-config", f"{d}/ca.cnf", "-cert", f"{d}/ca.pem", "-keyfile", f"{d}/ca.key", "-in", f"{d}/old.csr",
             "-out", f"{d}/old.pem", "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-extfile", ext, "-notext")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        body = json.dumps(LIST).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _serve(cert: str, key: str) -> tuple[http.server.ThreadingHTTPServer, int]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


@unittest.skipIf(shutil.which("openssl") is None, "the openssl command is not installed")
class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = tempfile.mkdtemp(prefix="svc-py-tls-")
        _make_certs(cls.dir)
        cls.srv, cls.port = _serve(f"{cls.dir}/srv.pem", f"{cls.dir}/srv.key")
        cls.old, cls.old_port = _serve(f"{cls.dir}/old.pem", f"{cls.dir}/old.key")

    @classmethod
    def tearDownClass(cls) -> None:
        for s in (cls.srv, cls.old):
            s.shutdown()
            s.server_close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def ca(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=f"{self.dir}/ca.pem")

    def refused(self, client: Client) -> SvcError:
        self.addCleanup(client.close)
        with self.assertRaises(SvcError) as e:
            client.list(NS)
        self.assertEqual(e.exception.code, "engine_unreachable")
        return e.exception

    def test_untrusted_certificate(self) -> None:
        url = f"https://localhost:{self.port}"
        e = self.refused(Client(url, KEY, max_retries=0, timeout=30))
        self.assertRegex(e.detail, r"^The TLS certificate of https://localhost:\d+ is not trusted \(.+\): pass "
                                   r"ssl_context=ssl\.create_default_context\(cafile=\.\.\.\) with the PEM file of the CA that "
                                   r"signed it, or set SSL_CERT_FILE to it\.$")

    def test_trusted_with_ssl_context(self) -> None:
        c = Client(f"https://localhost:{self.port}", KEY, max_retries=0, timeout=30, ssl_context=self.ca())
        self.addCleanup(c.close)
        self.assertEqual(c.list(NS), LIST)
        self.assertEqual(c.list(NS), LIST, "the kept-alive TLS connection serves a second request")

    def test_certificate_for_another_host(self) -> None:
        e = self.refused(Client(f"https://127.0.0.1:{self.port}", KEY, max_retries=0, timeout=30, ssl_context=self.ca()))
        self.assertRegex(e.detail, r"^The TLS certificate of https://127\.0\.0\.1:\d+ does not name its host \(.+\): use in base_url a "
                                   r"host name that the certificate names\.$")

    def test_expired_certificate(self) -> None:
        e = self.refused(Client(f"https://localhost:{self.old_port}", KEY, max_retries=0, timeout=30, ssl_context=self.ca()))
        self.assertRegex(e.detail, r"^The TLS certificate of https://localhost:\d+ is out of its validity dates \(.+\): the server "
                                   r"needs a current certificate\.$")

    def test_bad_ssl_context(self) -> None:
        for kw, url, sentence in (
            ({"ssl_context": "ca.pem"}, f"https://localhost:{self.port}",
             "ssl_context must be an ssl.SSLContext, such as ssl.create_default_context(cafile=...)."),
            ({"ssl_context": self.ca()}, "http://localhost:1", "ssl_context applies to an https base_url only."),
        ):
            with self.assertRaises(SvcError) as e:
                Client(url, KEY, **kw)
            self.assertEqual((e.exception.code, e.exception.detail), ("validation_error", sentence))


if __name__ == "__main__":
    unittest.main()
