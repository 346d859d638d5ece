"""Microsoft Entra ID bearer tokens, checked against the tenant's published signing keys.

A token is accepted when it is an RS256 JWT whose signature verifies with the tenant key its
``kid`` names, whose ``exp``/``nbf`` hold (with :data:`LEEWAY_S` for clock skew), whose
``aud`` is one of the configured audiences, whose ``iss`` is one of the tenant's issuers
(v1 and v2 forms, or the configured ones) and, when roles are configured, whose ``roles``
claim holds one of them.

The keys are fetched with PyJWT's ``PyJWKClient`` (bounded by :data:`FETCH_TIMEOUT_S`) and
kept for ``FLOW_AUTH_JWKS_CACHE_S``. A token naming an unknown ``kid`` refetches them at most
once per :data:`REFETCH_COOLDOWN_S` (tokens with made-up kids cause no fetch storm); while
the endpoint fails, the last keys fetched stay in use and it is not asked again for that long.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import jwt
from jwt import PyJWK, PyJWKClient
from jwt.exceptions import PyJWKClientConnectionError, PyJWKClientError, PyJWKSetError

from producer_lib.auth.settings import AuthSettings
from producer_lib.errors import AuthUnavailable, Unauthorized

__all__ = [
    "FETCH_TIMEOUT_S",
    "LEEWAY_S",
    "REFETCH_COOLDOWN_S",
    "EntraTokens",
    "TenantKeys",
    "subject",
]

log = logging.getLogger(__name__)

LEEWAY_S = 60.0  # clock skew between Entra ID and this host that exp/nbf tolerate
FETCH_TIMEOUT_S = 5.0  # a request waiting on the keys endpoint waits at most this long
REFETCH_COOLDOWN_S = 60.0  # between fetches forced by unknown kids, and after a failed fetch
MAX_TOKEN_CHARS = 16_384  # Entra tokens are a few KiB; anything longer is not one
_ALGORITHM = "RS256"  # what Entra ID signs with; never HS256 ("alg confusion") or none

# PyJWT's exceptions -> a fixed phrase for the log (their messages are not shown anywhere)
_REASONS: tuple[tuple[type[Exception], str], ...] = (
    (jwt.ExpiredSignatureError, "token expired"),
    (jwt.ImmatureSignatureError, "token not valid yet"),
    (jwt.InvalidAudienceError, "token for another audience"),
    (jwt.InvalidIssuerError, "token from another issuer"),
    (jwt.MissingRequiredClaimError, "token lacks a required claim"),
    (jwt.InvalidSignatureError, "token signature does not verify"),
    (jwt.InvalidAlgorithmError, "token algorithm not accepted"),
    (jwt.DecodeError, "malformed token"),
    (jwt.InvalidTokenError, "invalid token"),
)


class TenantKeys(PyJWKClient):
    """``PyJWKClient`` that keeps the last keys through an outage and backs off after one."""

    def __init__(self, url: str, cache_s: float) -> None:
        """Keys of ``url``, cached for ``cache_s`` seconds."""
        super().__init__(
            url,
            cache_jwk_set=True,
            lifespan=cache_s,
            timeout=FETCH_TIMEOUT_S,
            cooldown_duration=REFETCH_COOLDOWN_S,
        )
        self._last_good: Any = None
        self._failed_at: float | None = None

    def fetch_data(self) -> Any:
        """The key set from the endpoint; the last good one while it fails (see the module).

        Raises:
            PyJWKClientConnectionError: The endpoint failed (now or within the cooldown) and
                no key set was ever fetched.
        """
        now = time.monotonic()
        if self._failed_at is not None and now - self._failed_at < REFETCH_COOLDOWN_S:
            if self._last_good is not None:
                return self._last_good
            raise PyJWKClientConnectionError("the keys endpoint failed moments ago")
        try:
            data = super().fetch_data()
        except (PyJWKClientError, ValueError) as exc:  # ValueError: the answer is not JSON
            self._failed_at = now
            log.warning(
                "cannot fetch the Entra ID signing keys url=%s error=%s",
                self.uri,
                exc,
            )
            if self._last_good is not None:
                return self._last_good
            raise PyJWKClientConnectionError("the keys endpoint failed") from None
        self._failed_at, self._last_good = None, data
        return data


class EntraTokens:
    """Validates Entra ID access tokens for one API (see the module)."""

    def __init__(self, settings: AuthSettings) -> None:
        """Accept tokens as ``settings`` says (``settings.entra_configured`` must be true)."""
        self.tenant = (settings.entra_tenant_id or "").lower()
        self.audiences = settings.audiences
        self.issuers = settings.issuers
        self.roles = frozenset(settings.roles)
        self.keys = TenantKeys(settings.jwks_url, settings.jwks_cache_s)

    def describe(self) -> str:
        """The configuration, for the startup log."""
        roles = ",".join(sorted(self.roles)) or "-"
        return (
            f"entra_tenant={self.tenant} audiences={','.join(self.audiences)} "
            f"issuers={','.join(self.issuers)} roles={roles} jwks={self.keys.uri}"
        )

    def validate(self, token: str) -> dict[str, Any]:
        """The claims of ``token`` once every check passed.

        May block up to :data:`FETCH_TIMEOUT_S` while the signing keys are fetched.

        Raises:
            Unauthorized: The token is not valid here (the reason is a fixed phrase).
            AuthUnavailable: No signing keys could ever be fetched.
        """
        if len(token) > MAX_TOKEN_CHARS:
            raise Unauthorized("token too long")
        key = self._signing_key(token)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[_ALGORITHM],
                audience=list(self.audiences),
                issuer=list(self.issuers),
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(_reason(exc)) from None
        if self.roles and not self.roles & set(_strings(claims.get("roles"))):
            raise Unauthorized("token carries none of the required roles")
        return claims

    def _signing_key(self, token: str) -> PyJWK:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise Unauthorized("malformed token") from None
        if header.get("alg") != _ALGORITHM:
            raise Unauthorized("token algorithm not accepted")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Unauthorized("token names no signing key")
        try:
            return self.keys.get_signing_key(kid)
        except PyJWKClientConnectionError:
            raise AuthUnavailable(
                "the tenant's signing keys cannot be fetched; retry later", url=self.keys.uri
            ) from None
        except PyJWKSetError:
            raise AuthUnavailable(
                "the tenant's keys endpoint published no usable key", url=self.keys.uri
            ) from None
        except PyJWKClientError:
            raise Unauthorized("token signed by an unknown key") from None


def _reason(exc: Exception) -> str:
    return next(reason for kind, reason in _REASONS if isinstance(exc, kind))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def subject(claims: dict[str, Any]) -> str:
    """Who a token speaks for, for logs: its object id and, for an application, its client id."""
    parts = [f"oid={_safe(claims.get('oid') or claims.get('sub'))}"]
    app = claims.get("azp") or claims.get("appid")
    if app:
        parts.append(f"app={_safe(app)}")
    return " ".join(parts)


def _safe(value: Any) -> str:
    # identifiers from a verified token, yet still kept to what belongs in a log line
    return "".join(c for c in str(value) if c.isalnum() or c in "-_.@")[:64] or "-"
