"""Who may call a flow's HTTP routes: function keys and Microsoft Entra ID tokens.

Framework-neutral (no web framework imported): ``producer-lib serve`` wraps it in an aiohttp
middleware, and any other server can do the same. Quickstart::

    from producer_lib.auth import Authenticator, check_exposure
    from producer_lib.errors import AuthUnavailable, Unauthorized

    auth = Authenticator.from_settings("LABWARE")   # FLOW_AUTH_* from the environment
    check_exposure(host, auth, insecure=False)      # no auth on 0.0.0.0: ConfigError
    try:
        caller = auth.authenticate(request_headers, request_query)  # on a worker thread
    except Unauthorized:
        ...  # 401, same body whatever the reason; log exc.reason, never the credential
    except AuthUnavailable:
        ...  # 503: the tenant's signing keys cannot be fetched now

Settings: :class:`AuthSettings` (``FLOW_AUTH_*``); see ``docs/SERVING.md``.
"""

from producer_lib.auth.authenticator import (
    ANONYMOUS,
    KEY_HEADER,
    KEY_PARAMETER,
    Authenticator,
    Caller,
    check_exposure,
)
from producer_lib.auth.keys import MIN_KEY_LENGTH, KeyRing
from producer_lib.auth.settings import AuthSettings, is_loopback

__all__ = [
    "ANONYMOUS",
    "KEY_HEADER",
    "KEY_PARAMETER",
    "MIN_KEY_LENGTH",
    "AuthSettings",
    "Authenticator",
    "Caller",
    "KeyRing",
    "check_exposure",
    "is_loopback",
]
