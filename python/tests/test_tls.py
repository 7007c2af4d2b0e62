"""TLS: an https:// dispatcher whose certificate a CA file signs is trusted with
``ca_file``, and refused without it (not retried). Certificates are made with the
``openssl`` command at test time (skipped without it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import unittest
from typing import Any

from fakes import FakeServer, Request, ok

from shardwise import Dispatcher, ShardwiseError

CA_EXT = """basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
"""
LEAF_EXT = """basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def openssl(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def version(_: Request) -> Any:
    return ok({"version": 1, "incarnation": "i", "fault_tolerant": False})


@unittest.skipUnless(shutil.which("openssl"), "needs the openssl command")
class Tls(unittest.TestCase):
    dir: str

    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = tempfile.mkdtemp(prefix="shardwise-tls-")
        d = cls.dir
        for name, text in (("ca.ext", CA_EXT), ("leaf.ext", LEAF_EXT)):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        openssl(
            "req",
            *key,
            "-keyout",
            "ca.key",
            "-out",
            "ca.csr",
            "-subj",
            "/CN=shardwise test CA",
            cwd=d,
        )
        openssl(
            "x509",
            "-req",
            "-in",
            "ca.csr",
            "-signkey",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-extfile",
            "ca.ext",
            cwd=d,
        )
        openssl(
            "req", *key, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=127.0.0.1", cwd=d
        )
        openssl(
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "leaf.pem",
            "-days",
            "2",
            "-extfile",
            "leaf.ext",
            cwd=d,
        )

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_a_ca_file_is_trusted_and_without_it_the_handshake_fails_at_once(self) -> None:
        tls = (os.path.join(self.dir, "leaf.pem"), os.path.join(self.dir, "leaf.key"))
        with FakeServer(version, tls=tls) as s:
            self.assertTrue(s.url.startswith("https://"))
            d = Dispatcher(s.url, ca_file=os.path.join(self.dir, "ca.pem"))
            self.assertEqual(d.version()["version"], 1)
            self.assertEqual(d.worker_url("127.0.0.1:6000"), "https://127.0.0.1:6000")
            with self.assertRaises(ShardwiseError) as cm:
                Dispatcher(s.url, unavailable_timeout=3600).version()
            e = cm.exception
            self.assertEqual((e.code, e.kind, e.is_retryable), ("UNAVAILABLE", "tls", False))
            self.assertIn("TLS handshake failed", e.detail)

    def test_a_ca_file_that_is_not_one_is_refused_when_the_dispatcher_is_made(self) -> None:
        with self.assertRaises((OSError, ValueError)):
            Dispatcher("https://127.0.0.1:1", ca_file=os.path.join(self.dir, "ca.ext"))
        with self.assertRaises(OSError):
            Dispatcher("https://127.0.0.1:1", ca_file=os.path.join(self.dir, "missing.pem"))


if __name__ == "__main__":
    unittest.main()
