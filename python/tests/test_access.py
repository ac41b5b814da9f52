"""Access: the token a local tetherd generated is found by default, and TLS with a private CA."""

from __future__ import annotations

import json
import ssl
import subprocess
from pathlib import Path

import pytest

from tether_client import AsyncClient, TransportError, Unauthorized, local_token_path, runtime_dir

from .conftest import FAST_RETRY, Tetherd


async def test_a_client_on_this_machine_finds_the_generated_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = Tetherd(env={"XDG_RUNTIME_DIR": str(tmp_path)}, tokenless=False)
    try:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
        monkeypatch.delenv("TETHER_TOKEN_FILE", raising=False)
        assert local_token_path() is None
        assert runtime_dir() == tmp_path / "tether" / "servers"
        (entry,) = (tmp_path / "tether" / "servers").glob("tetherd-*.json")
        async with AsyncClient(daemon.base, retry=FAST_RETRY) as client:
            assert client.token == json.loads(entry.read_text())["token"]
            result = await client.exec("echo found")
            assert result.stdout == b"found\n"
        # Reached as localhost: not the origin the entry names (localhost may
        # be another listener, on ::1), so not its token.
        async with AsyncClient(daemon.base.replace("127.0.0.1", "localhost"), retry=FAST_RETRY) as client:
            assert client.token is None
        # Elsewhere there is no runtime entry: the server refuses, and says where the client looked.
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "elsewhere"))
        async with AsyncClient(daemon.base, retry=FAST_RETRY) as client:
            with pytest.raises(Unauthorized, match="no runtime entry for"):
                await client.list()
    finally:
        daemon.stop()


def make_pki(directory: Path) -> None:
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=tether python test CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")  # fmt: skip
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (directory / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "server.ext")  # fmt: skip


async def test_over_tls_a_client_with_the_tests_own_ca_attaches_over_wss(tmp_path: Path) -> None:
    make_pki(tmp_path)
    token = "python-tls-token"
    daemon = Tetherd(
        "--token", token, "--tls-cert", str(tmp_path / "server.pem"), "--tls-key", str(tmp_path / "server.key")
    )
    try:
        assert daemon.base.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        async with AsyncClient(daemon.base, token=token, ssl=context, retry=FAST_RETRY) as client:
            process = await client.spawn("read line; echo \"tls $line\"", stdin=True)
            async with client.attach(process.id) as attachment:
                await attachment.write(b"wss\n")
                out = b""
                async for chunk in attachment.stdout:
                    out += getattr(chunk, "data", b"")
                info = await attachment.wait()
            assert out == b"tls wss\n"
            assert info.exit_code == 0
        # Without the CA the server's certificate is not trusted.
        async with AsyncClient(daemon.base, token=token, retry=FAST_RETRY) as untrusting:
            with pytest.raises(TransportError):
                await untrusting.list()
    finally:
        daemon.stop()

