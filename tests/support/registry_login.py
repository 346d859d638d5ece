"""A schema registry that refuses anonymous requests: TLS and a login in front of Apicurio.

Apicurio's in-memory registry (``schema_registry_url``) answers anybody. Production registries
(Confluent Cloud, a secured Karapace or Apicurio) ask for basic auth or a bearer token over TLS.
:func:`secured_registry` puts a small reverse proxy in front of it on loopback: HTTPS with a
certificate of a CA made for the test, and every request without the right login answered
``401`` the way Confluent's registry does (``{"error_code": 40101, ...}``). What passes is
forwarded as it is. The proxy counts refusals, so a test can tell that a client logged in.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from aiohttp import ClientSession, web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.ports import free_port_block

USER, PASSWORD = "flow-registry", "Reg1stry-S3cret-pw-77"
TOKEN = "registry-bearer-token-5f3a"


@dataclass
class SecuredRegistry:
    """The proxy: its HTTPS URL (same path as the registry's), CA file, and what it refused."""

    url: str
    ca_file: Path
    refused: list[str] = field(default_factory=list)

    def env(self, login: str = "basic", password: str = PASSWORD) -> dict[str, str]:
        """``SCHEMA_REGISTRY_*`` of a client that logs in with ``login`` (basic|bearer)."""
        env = {
            "SCHEMA_REGISTRY_URL": self.url,
            "SCHEMA_REGISTRY_SSL_CA_LOCATION": str(self.ca_file),
        }
        if login == "basic":
            env |= {
                "SCHEMA_REGISTRY_BASIC_AUTH_USER": USER,
                "SCHEMA_REGISTRY_BASIC_AUTH_PASSWORD": password,
            }
        else:
            env |= {"SCHEMA_REGISTRY_BEARER_AUTH_TOKEN": password}
        return env


@pytest.fixture(scope="session")
def secured_registry(schema_registry_url: str, tmp_path_factory) -> Iterator[SecuredRegistry]:
    """The session's registry behind TLS and a login (basic ``USER``/``PASSWORD`` or ``TOKEN``)."""
    folder = tmp_path_factory.mktemp("registry-tls")
    ca_file, context = _tls(folder)
    upstream = urlsplit(schema_registry_url)
    port = free_port_block(1)
    made = SecuredRegistry(f"https://127.0.0.1:{port}{upstream.path}", ca_file)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runner: list[web.AppRunner] = []

    async def serve() -> None:
        app = _proxy(f"{upstream.scheme}://{upstream.netloc}", made.refused)
        runner.append(web.AppRunner(app, access_log=None))
        await runner[0].setup()
        await web.TCPSite(runner[0], "127.0.0.1", port, ssl_context=context).start()
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True, name="registry-proxy")
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop)
    assert started.wait(30), "the registry proxy did not start"
    yield made
    asyncio.run_coroutine_threadsafe(runner[0].cleanup(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(30)


def _proxy(upstream: str, refused: list[str]) -> web.Application:
    basic = "Basic " + __import__("base64").b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    accepted = {basic, f"Bearer {TOKEN}"}

    async def forward(request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") not in accepted:
            refused.append(request.path)
            return web.json_response({"error_code": 40101, "message": "Unauthorized"}, status=401)
        headers = {k: v for k, v in request.headers.items() if k.lower() in _FORWARDED}
        async with (
            ClientSession() as session,
            session.request(
                request.method,
                upstream + request.path_qs,
                data=await request.read(),
                headers=headers,
            ) as answer,
        ):
            body = await answer.read()
            kind = answer.headers.get("Content-Type", "application/json")
            return web.Response(status=answer.status, body=body, headers={"Content-Type": kind})

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", forward)
    return app


_FORWARDED = {"content-type", "accept"}


def _tls(folder: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA (its PEM file) and a server context for 127.0.0.1 signed by it."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test registry CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return ca_file, context
