"""producer_lib.auth on its own: keys scoped per function, Entra ID tokens checked against a
tenant's published keys (a loopback stand-in), and the settings that configure both."""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from multidict import CIMultiDict

from producer_lib.auth import Authenticator, AuthSettings, check_exposure, is_loopback
from producer_lib.auth.entra import REFETCH_COOLDOWN_S
from producer_lib.errors import AuthUnavailable, ConfigError, Unauthorized
from tests.support.entra import AUDIENCE, new_key, running_tenant

KEY_A1, KEY_A2 = "a1-" + "x" * 30, "a2-" + "y" * 30
KEY_B = "b-" + "z" * 30
HOST_KEY = "host-" + "h" * 30
FUNCTION_KEYS = json.dumps({"flow_a": [KEY_A1, KEY_A2], "flow_b": KEY_B})


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no stray .env
    for name in [n for n in __import__("os").environ if n.startswith(("FLOW_AUTH_", "SECRET_"))]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("AZURE_KEY_VAULT_URL", raising=False)


def keyed(function: str = "flow_a", **settings: str) -> Authenticator:
    values = {"function_keys": FUNCTION_KEYS, "host_keys": HOST_KEY, **settings}
    return Authenticator.from_settings(function, AuthSettings(**values))


def refused(auth: Authenticator, headers=None, query=None) -> str:
    with pytest.raises(Unauthorized) as caught:
        auth.authenticate(headers or {}, query or {})
    return caught.value.reason


# -- keys -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "query", "method"),
    [
        ({"x-functions-key": KEY_A1}, {}, "function_key"),
        ({"X-Functions-Key": KEY_A2}, {}, "function_key"),  # rotation: both keys open
        ({}, {"code": KEY_A1}, "function_key"),
        ({"x-functions-key": HOST_KEY}, {}, "host_key"),
        ({}, {"code": HOST_KEY}, "host_key"),
    ],
    ids=["header", "header-second-key", "code", "host-header", "host-code"],
)
def test_a_key_of_the_function_or_of_the_host_opens_it(headers, query, method):
    caller = keyed().authenticate(headers, query)
    assert caller.method == method
    assert KEY_A1 not in repr(caller) and HOST_KEY not in repr(caller)


@pytest.mark.parametrize(
    ("headers", "query", "reason"),
    [
        ({}, {}, "no credential"),
        ({"x-functions-key": KEY_B}, {}, "unknown key"),  # function B's key, function A
        ({}, {"code": KEY_B}, "unknown key"),
        ({"x-functions-key": KEY_A1[:-1]}, {}, "unknown key"),
        ({"x-functions-key": ""}, {}, "unknown key"),
        ({"x-functions-key": KEY_A1}, {"code": "wrong-" + "k" * 20}, "unknown key"),
        ({"Authorization": f"Basic {KEY_A1}"}, {}, "Authorization is not a bearer token"),
        ({"Authorization": "Bearer x.y.z"}, {}, "bearer tokens are not accepted here"),
    ],
    ids=[
        "none",
        "other-function-header",
        "other-function-code",
        "truncated",
        "empty",
        "right-beside-wrong",
        "basic-auth",
        "token-without-entra",
    ],
)
def test_a_wrong_missing_or_foreign_key_is_refused(headers, query, reason):
    assert refused(keyed(), headers, query) == reason


def test_function_b_key_opens_function_b_only():
    assert keyed("flow_b").authenticate({"x-functions-key": KEY_B}, {}).method == "function_key"
    assert refused(keyed("flow_b"), {"x-functions-key": KEY_A1}) == "unknown key"


def test_a_repeated_authorization_header_is_refused():
    headers = CIMultiDict([("Authorization", "Bearer a.b.c"), ("Authorization", "Bearer d.e.f")])
    assert refused(keyed(), headers) == "Authorization header given twice"


def test_keys_come_from_a_secret_too(monkeypatch):
    # read_secret: the environment variable SECRET_<NAME> outside Azure, Key Vault in it
    monkeypatch.setenv("SECRET_FLOW_FUNCTION_KEYS", json.dumps({"flow_a": KEY_A1}))
    monkeypatch.setenv("SECRET_FLOW_HOST_KEYS", f"{HOST_KEY}, other-{HOST_KEY}")
    monkeypatch.setenv("FLOW_AUTH_FUNCTION_KEYS_SECRET", "flow-function-keys")
    monkeypatch.setenv("FLOW_AUTH_HOST_KEYS_SECRET", "flow-host-keys")
    auth = Authenticator.from_settings("flow_a")
    assert auth.authenticate({"x-functions-key": KEY_A1}, {}).method == "function_key"
    assert auth.authenticate({}, {"code": f"other-{HOST_KEY}"}).method == "host_key"
    assert auth.describe() == "flow=flow_a function_keys=1 host_keys=2 entra=off"


def test_a_missing_key_secret_names_the_secret_and_where_it_was_looked_for(monkeypatch):
    monkeypatch.setenv("FLOW_AUTH_HOST_KEYS_SECRET", "flow-host-keys")
    with pytest.raises(ConfigError, match="SECRET_FLOW_HOST_KEYS"):
        Authenticator.from_settings("flow_a")


MARK = "S3cr3t"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"FLOW_AUTH_FUNCTION_KEYS": f"{MARK}-not-json-at-all"}, "FLOW_AUTH_FUNCTION_KEYS must be"),
        ({"FLOW_AUTH_FUNCTION_KEYS": json.dumps([f"{MARK}-" + "k" * 20])}, "JSON object"),
        ({"FLOW_AUTH_FUNCTION_KEYS": json.dumps({"f": f"{MARK}1"})}, "shorter than 16"),
        ({"FLOW_AUTH_FUNCTION_KEYS": json.dumps({"f": [1, f"{MARK}" * 5]})}, "list of strings"),
        ({"FLOW_AUTH_HOST_KEYS": f"{MARK}-" + "k" * 20 + f",{MARK}"}, "FLOW_AUTH_HOST_KEYS: a key"),
        (
            {"FLOW_AUTH_HOST_KEYS": f"{MARK}-" + "k" * 20, "FLOW_AUTH_HOST_KEYS_SECRET": "x"},
            "keep the keys in one place",
        ),
        ({"FLOW_AUTH_ENTRA_TENANT_ID": "contoso.onmicrosoft.com"}, "FLOW_AUTH_ENTRA_TENANT_ID"),
        (
            {"FLOW_AUTH_ENTRA_TENANT_ID": "7d3c2f5e-1b4a-4c8e-9f00-0123456789ab"},
            "needs FLOW_AUTH_ENTRA_AUDIENCE",
        ),
        ({"FLOW_AUTH_ENTRA_AUDIENCE": "api://x"}, "needs FLOW_AUTH_ENTRA_TENANT_ID"),
        (
            {
                "FLOW_AUTH_ENTRA_TENANT_ID": "7d3c2f5e-1b4a-4c8e-9f00-0123456789ab",
                "FLOW_AUTH_ENTRA_AUDIENCE": "api://x",
                "FLOW_AUTH_ENTRA_JWKS_URL": "http://keys.example/keys",
            },
            "must be an https URL",
        ),
    ],
    ids=[
        "keys-not-json",
        "keys-a-list",
        "short-key",
        "key-not-a-string",
        "short-host-key",
        "host-keys-twice",
        "tenant-not-a-guid",
        "tenant-without-audience",
        "audience-without-tenant",
        "jwks-over-http",
    ],
)
def test_bad_settings_name_the_variable_and_never_a_key(monkeypatch, caplog, env, named):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        Authenticator.from_settings("f")
    assert named in str(caught.value)
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").exception("failed: %s", caught.value)
    assert MARK not in str(caught.value) + repr(caught.value) + caplog.text


def test_settings_never_show_a_key(monkeypatch):
    monkeypatch.setenv("FLOW_AUTH_FUNCTION_KEYS", json.dumps({"f": f"{MARK}-" + "k" * 20}))
    monkeypatch.setenv("FLOW_AUTH_HOST_KEYS", f"{MARK}-" + "h" * 20)
    settings = AuthSettings()
    auth = Authenticator.from_settings("f", settings)
    shown = [repr(settings), str(settings), str(settings.model_dump()), repr(auth.keys)]
    shown += [settings.model_dump_json(), auth.describe()]
    assert not [text for text in shown if MARK in text]


# -- exposure -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.1.2.3", False),
        ("myhost", False),
    ],
)
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback


def test_serving_without_auth_beyond_loopback_is_refused_unless_insecure(caplog):
    nothing = Authenticator.from_settings("flow_a", AuthSettings())
    assert not nothing.configured
    with pytest.raises(ConfigError) as caught:
        check_exposure("0.0.0.0", nothing)
    for setting in ("FLOW_AUTH_FUNCTION_KEYS", "FLOW_AUTH_HOST_KEYS", "FLOW_AUTH_ENTRA_TENANT_ID"):
        assert setting in str(caught.value)
    assert "--insecure" in str(caught.value)
    with caplog.at_level(logging.WARNING):
        check_exposure("127.0.0.1", nothing)
        check_exposure("0.0.0.0", nothing, insecure=True)
    assert [r.levelname for r in caplog.records] == ["WARNING", "ERROR"]
    assert all("WITHOUT AUTHENTICATION" in r.getMessage() for r in caplog.records)
    check_exposure("0.0.0.0", keyed())  # configured: any address


def test_keys_of_other_functions_only_do_not_count_as_configured(caplog):
    with caplog.at_level(logging.WARNING):
        auth = Authenticator.from_settings(
            "flow_c", AuthSettings(function_keys=json.dumps({"flow_a": KEY_A1}))
        )
    assert not auth.configured
    assert "no function key for flow=flow_c" in caplog.text
    with pytest.raises(ConfigError):
        check_exposure("0.0.0.0", auth)


# -- Entra ID tokens --------------------------------------------------------------------------


@pytest.fixture
def tenant():
    with running_tenant() as tenant:
        yield tenant


def entra(tenant, **extra: str) -> Authenticator:
    values = {k.removeprefix("FLOW_AUTH_").lower(): v for k, v in tenant.settings().items()}
    return Authenticator.from_settings("flow_a", AuthSettings(**{**values, **extra}))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_valid_token_is_accepted_in_both_issuer_forms(tenant):
    auth = entra(tenant)
    for issuer in (tenant.v2_issuer, tenant.v1_issuer):
        caller = auth.authenticate(bearer(tenant.token(iss=issuer, oid="o-1", azp="app-1")), {})
        assert (caller.method, caller.subject) == ("entra_id", "oid=o-1 app=app-1")
    assert tenant.fetches == 1  # the keys were fetched once and cached


def test_the_audience_may_be_one_of_several(tenant):
    auth = entra(tenant, entra_audience=f"{AUDIENCE}, 11111111-2222-3333-4444-555555555555")
    token = tenant.token(aud="11111111-2222-3333-4444-555555555555")
    assert auth.authenticate(bearer(token), {}).method == "entra_id"


def _alg_confusion(tenant) -> str:
    """HS256 signed with the tenant's public key as the HMAC secret (the classic attack)."""
    import base64
    import hashlib
    import hmac

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    from cryptography.hazmat.primitives import serialization

    pem = tenant.key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": tenant.kid}).encode())
    body = b64(json.dumps(tenant.claims()).encode())
    signature = hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(signature)}"


def _unsigned(tenant) -> str:
    import base64

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "none", "kid": tenant.kid}).encode())
    return f"{head}.{b64(json.dumps(tenant.claims()).encode())}."


BAD_TOKENS = {
    "expired": (lambda t: t.token(exp=int(time.time()) - 600), "token expired"),
    "not-yet-valid": (lambda t: t.token(nbf=int(time.time()) + 600), "token not valid yet"),
    "wrong-audience": (lambda t: t.token(aud="api://another-api"), "token for another audience"),
    "other-tenant": (
        lambda t: t.token(iss="https://login.microsoftonline.com/other/v2.0"),
        "token from another issuer",
    ),
    "no-exp": (lambda t: t.token(exp=None), "token lacks a required claim"),
    "no-role": (
        lambda t: t.token(roles=["Other.Role"]),
        "token carries none of the required roles",
    ),
    "forged-same-kid": (lambda t: t.token(key=new_key()), "token signature does not verify"),
    "unknown-kid": (lambda t: t.token(kid="made-up"), "token signed by an unknown key"),
    "alg-confusion-hs256": (_alg_confusion, "token algorithm not accepted"),
    "alg-none": (_unsigned, "token algorithm not accepted"),
    "garbage": (lambda t: "not.a.jwt", "malformed token"),
    "too-long": (lambda t: "e" * 20_000, "token too long"),
}


@pytest.mark.parametrize("case", sorted(BAD_TOKENS))
def test_a_bad_token_is_refused_with_a_fixed_reason(tenant, case):
    make, reason = BAD_TOKENS[case]
    token = make(tenant)
    assert refused(entra(tenant), bearer(token)) == reason


def test_a_token_beside_a_wrong_key_is_refused(tenant):
    auth = entra(tenant, host_keys=HOST_KEY)
    headers = {**bearer(tenant.token()), "x-functions-key": "wrong-" + "k" * 20}
    assert refused(auth, headers) == "unknown key"


def test_made_up_kids_cause_one_refetch_per_cooldown_not_a_storm(tenant):
    auth = entra(tenant)
    assert auth.authenticate(bearer(tenant.token()), {}).method == "entra_id"
    tokens = [tenant.token(kid=f"forged-{i}") for i in range(200)]
    with ThreadPoolExecutor(8) as pool:
        reasons = list(pool.map(lambda t: refused(auth, bearer(t)), tokens))
    assert set(reasons) == {"token signed by an unknown key"}
    assert tenant.fetches <= 2, tenant.fetches  # the first fetch and at most one refetch
    assert REFETCH_COOLDOWN_S >= 30


def test_an_unreachable_keys_endpoint_is_a_503_once_and_the_last_keys_stay_in_use(tenant):
    auth = entra(tenant, jwks_cache_s="0.2")
    tenant.fail = True
    with pytest.raises(AuthUnavailable):
        auth.authenticate(bearer(tenant.token()), {})
    with pytest.raises(AuthUnavailable):  # not asked again within the cooldown
        auth.authenticate(bearer(tenant.token()), {})
    assert tenant.fetches == 1

    fresh = entra(tenant, jwks_cache_s="0.2")
    tenant.fail = False
    assert fresh.authenticate(bearer(tenant.token()), {}).method == "entra_id"
    tenant.fail = True
    time.sleep(0.3)  # the cache expired; the endpoint fails; the last keys still verify
    assert fresh.authenticate(bearer(tenant.token()), {}).method == "entra_id"
