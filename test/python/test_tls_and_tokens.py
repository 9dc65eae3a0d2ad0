"""The clients' `token`, `tls` and `ca_file` against a real sidecar with TLS and bearer tokens on."""

from __future__ import annotations

import asyncio
import pathlib
import secrets
import subprocess
from typing import Iterator, Tuple

import pytest

from conftest import Sidecar
from contextd.client import AsyncClient, Client, DeadlineExceeded, RetryPolicy, Unauthenticated, Unavailable, append_user, user_text
from contextd.v1 import conversation_service_pb2 as conv


def make_certificates(directory: pathlib.Path) -> Tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """A throwaway CA and a server certificate it signed for localhost and 127.0.0.1 (openssl,
    which scripts/test.sh installs); returns the CA, certificate and key files."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    for name in ("ca", "server"):
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key")
    openssl("req", "-x509", "-new", "-key", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=contextd test CA")
    openssl("req", "-new", "-key", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    (directory / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "1", "-extfile", "server.ext")
    return directory / "ca.pem", directory / "server.pem", directory / "server.key"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuple[Sidecar, str, str]]:
    """A sidecar with TLS and one bearer token; yields it, the CA file and the token."""
    directory = tmp_path_factory.mktemp("tls")
    ca, cert, key = make_certificates(directory)
    token = "token-" + secrets.token_hex(16)
    tokens = directory / "tokens"
    tokens.write_text(token + "\n")
    running = Sidecar("--tls-cert", str(cert), "--tls-key", str(key), "--auth-tokens-file", str(tokens))
    yield running, str(ca), token
    running.stop()


def test_token_over_tls_unary_and_stream(secured):
    sidecar, ca, token = secured
    conversation = "py-tls-" + secrets.token_hex(6)
    with Client(sidecar.address, token=token, ca_file=ca) as client:
        client.wait_ready(timeout=10)
        committed = client.commit(conv.CommitRequest(conversation_id=conversation, deltas=[append_user(user_text("over TLS"))]))
        assert committed.version == 1
        for change in client.watch(conv.WatchRequest(conversation_id=conversation)):
            assert change.version == 1
            break


def test_async_client_token_over_tls(secured):
    sidecar, ca, token = secured
    conversation = "py-tls-async-" + secrets.token_hex(6)

    async def main() -> int:
        async with AsyncClient(sidecar.address, token=token, ca_file=ca) as client:
            await client.wait_ready(timeout=10)
            committed = await client.commit(conv.CommitRequest(conversation_id=conversation, deltas=[append_user(user_text("hi"))]))
            return committed.version

    assert asyncio.run(main()) == 1


def test_missing_or_wrong_token_is_unauthenticated(secured):
    sidecar, ca, _ = secured
    for token in (None, "not-the-token-0123456789"):
        with Client(sidecar.address, token=token, ca_file=ca) as client:
            with pytest.raises(Unauthenticated):
                client.get_state(conv.GetStateRequest(conversation_id="py-tls-denied"))


def test_cleartext_and_default_roots_are_refused(secured):
    sidecar, _, token = secured
    once = RetryPolicy(max_attempts=1)
    for options in ({}, {"tls": True}):
        with Client(sidecar.address, token=token if options else None, retry=once, timeout=3, **options) as client:
            with pytest.raises((Unavailable, DeadlineExceeded)):
                client.get_state(conv.GetStateRequest(conversation_id="py-tls-refused"))


def test_token_in_cleartext_to_loopback(tmp_path):
    token = "token-" + secrets.token_hex(16)
    tokens = tmp_path / "tokens"
    tokens.write_text(token)
    sidecar = Sidecar("--auth-tokens-file", str(tokens))
    try:
        with Client(sidecar.address, token=token) as client:
            assert client.get_state(conv.GetStateRequest(conversation_id="py-cleartext-token")).state.version == 0
        with Client(sidecar.address) as client:
            with pytest.raises(Unauthenticated):
                client.get_state(conv.GetStateRequest(conversation_id="py-cleartext-token"))
    finally:
        sidecar.stop()


def test_tls_options_do_not_mix_with_a_channel():
    import grpc

    channel = grpc.insecure_channel("127.0.0.1:1")
    try:
        with pytest.raises(ValueError, match="give them to your channel"):
            Client(channel=channel, token="x" * 16)
    finally:
        channel.close()


def test_client_certificates_for_mutual_tls(tmp_path):
    # A sidecar started with --tls-client-ca: the clients' cert_file/key_file present a client
    # certificate its CA signed; without one the handshake is refused.
    ca, cert, key = make_certificates(tmp_path)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp_path)

    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "client.key")
    openssl("req", "-new", "-key", "client.key", "-out", "client.csr", "-subj", "/CN=contextd test client")
    (tmp_path / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "client.pem", "-days", "1", "-extfile", "client.ext")
    running = Sidecar("--tls-cert", str(cert), "--tls-key", str(key), "--tls-client-ca", str(ca))
    try:
        conversation = "py-mtls-" + secrets.token_hex(6)
        pair = {"cert_file": str(tmp_path / "client.pem"), "key_file": str(tmp_path / "client.key")}
        with Client(running.address, ca_file=str(ca), **pair) as client:
            client.wait_ready(timeout=10)
            committed = client.commit(conv.CommitRequest(conversation_id=conversation, deltas=[append_user(user_text("mutual"))]))
            assert committed.version == 1

        async def main() -> int:
            async with AsyncClient(running.address, ca_file=str(ca), **pair) as client:
                await client.wait_ready(timeout=10)
                return (await client.get_state(conv.GetStateRequest(conversation_id=conversation))).state.version

        assert asyncio.run(main()) == 1
        fast = RetryPolicy(initial_backoff=0.02, max_backoff=0.05)
        with Client(running.address, ca_file=str(ca), retry=fast) as anonymous:
            with pytest.raises(DeadlineExceeded):
                anonymous.wait_ready(timeout=0.5)
        with pytest.raises(ValueError, match="go together"):
            Client(running.address, ca_file=str(ca), cert_file=pair["cert_file"])
    finally:
        running.stop()
