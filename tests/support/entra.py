"""A stand-in Entra ID tenant on loopback: its own RSA signing key, published as a JWKS.

The tests sign tokens with a key they made and publish its public half at
``http://127.0.0.1:<port>/keys`` (``FLOW_AUTH_ENTRA_JWKS_URL``), counting the fetches. A
token "from Entra" is then exactly what the server must verify: RS256, a ``kid``, the tenant's
issuer, an audience, ``exp``/``nbf``, ``roles``.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

AUDIENCE = "api://flow-guard-test"
ROLE = "Flow.Run"


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@functools.cache
def _tenant_key() -> rsa.RSAPrivateKey:
    """One signing key for every stand-in tenant of a session (making one takes ~0.2 s)."""
    return new_key()


@dataclass
class Tenant:
    """A tenant id, a signing key with its kid, and the JWKS endpoint that publishes it."""

    tenant_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    kid: str = field(default_factory=lambda: f"kid-{uuid.uuid4().hex[:12]}")
    key: rsa.RSAPrivateKey = field(default_factory=_tenant_key)
    jwks_url: str = ""
    fetches: int = 0
    fail: bool = False  # the endpoint answers 500 while set

    @property
    def v2_issuer(self) -> str:
        return f"https://login.microsoftonline.com/{self.tenant_id}/v2.0"

    @property
    def v1_issuer(self) -> str:
        return f"https://sts.windows.net/{self.tenant_id}/"

    def jwks(self) -> dict[str, Any]:
        public = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": self.kid, "use": "sig", "kty": "RSA"}]}

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "iss": self.v2_issuer,
            "aud": AUDIENCE,
            "iat": now - 5,
            "nbf": now - 5,
            "exp": now + 600,
            "tid": self.tenant_id,
            "oid": str(uuid.uuid4()),
            "azp": str(uuid.uuid4()),
            "roles": [ROLE],
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def token(
        self,
        key: rsa.RSAPrivateKey | None = None,
        kid: str | None = None,
        algorithm: str = "RS256",
        **claims: Any,
    ) -> str:
        """A token with ``claims`` over the defaults (None drops one), signed by ``key``."""
        signing: Any = key or self.key
        return jwt.encode(
            self.claims(**claims), signing, algorithm=algorithm, headers={"kid": kid or self.kid}
        )

    def settings(self) -> dict[str, str]:
        """The ``FLOW_AUTH_ENTRA_*`` variables that trust this tenant."""
        return {
            "FLOW_AUTH_ENTRA_TENANT_ID": self.tenant_id,
            "FLOW_AUTH_ENTRA_AUDIENCE": AUDIENCE,
            "FLOW_AUTH_ENTRA_JWKS_URL": self.jwks_url,
            "FLOW_AUTH_ENTRA_ROLES": ROLE,
        }


@contextmanager
def running_tenant() -> Iterator[Tenant]:
    """A :class:`Tenant` whose JWKS endpoint serves on a free loopback port until exit."""
    tenant = Tenant()

    class Keys(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            tenant.fetches += 1
            status, body = (
                (500, b"{}") if tenant.fail else (200, json.dumps(tenant.jwks()).encode())
            )
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Keys)
    tenant.jwks_url = f"http://127.0.0.1:{server.server_address[1]}/keys"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield tenant
    finally:
        server.shutdown()
        server.server_close()
