"""Function and host keys: read once, kept as SHA-256 digests, compared in constant time.

Keys are scoped as in Azure Functions: a *function key* opens the routes of the function it
is listed under and of no other; a *host key* opens every function. Several keys per
function (and several host keys) let a key be rotated: add the new one, move the callers,
remove the old one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from producer_lib.auth.settings import AuthSettings
from producer_lib.azure_utils import read_secret, secret_source
from producer_lib.errors import ConfigError

__all__ = ["MIN_KEY_LENGTH", "KeyRing", "load_key_ring"]

MIN_KEY_LENGTH = 16  # a guessable key is no key; Azure's own keys are 40+ characters
_FUNCTION_KEYS_FORM = '{"<function>": "<key>" | ["<key>", ...]}'

KeyKind = Literal["function_key", "host_key"]


def _digest(key: str) -> bytes:
    # Equal-length digests: compare_digest then takes the same time whatever the key's length.
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True)
class KeyRing:
    """The keys a server accepts, as digests (never shown: ``repr`` hides them).

    Attributes:
        function_keys: Function name -> digests of its keys.
        host_keys: Digests of the keys valid for every function.
    """

    function_keys: Mapping[str, tuple[bytes, ...]] = field(default_factory=dict, repr=False)
    host_keys: tuple[bytes, ...] = field(default=(), repr=False)

    @classmethod
    def of(cls, function_keys: Mapping[str, list[str]], host_keys: list[str]) -> KeyRing:
        """A ring from plain keys (already checked for length)."""
        return cls(
            {name: tuple(_digest(k) for k in keys) for name, keys in function_keys.items()},
            tuple(_digest(k) for k in host_keys),
        )

    def opens(self, function_name: str) -> bool:
        """Whether any key opens ``function_name``."""
        return bool(self.host_keys or self.function_keys.get(function_name))

    def match(self, function_name: str, presented: str) -> KeyKind | None:
        """Which kind of key ``presented`` is for ``function_name``; None: not a valid key.

        Every stored key is compared (no early exit), each in constant time.
        """
        digest = _digest(presented)
        own = [hmac.compare_digest(d, digest) for d in self.function_keys.get(function_name, ())]
        host = [hmac.compare_digest(d, digest) for d in self.host_keys]
        if any(own):
            return "function_key"
        if any(host):
            return "host_key"
        return None

    def describe(self, function_name: str) -> str:
        """How many keys open ``function_name``, for the startup log (no key shown)."""
        own = len(self.function_keys.get(function_name, ()))
        return f"function_keys={own} host_keys={len(self.host_keys)}"


def load_key_ring(settings: AuthSettings) -> KeyRing:
    """The keys of ``settings``: from their variables, or from the secrets they name.

    Raises:
        ConfigError: A key source is malformed, a key is shorter than
            :data:`MIN_KEY_LENGTH`, or a named secret cannot be read. The message names the
            variable or secret and the function, never a key.
    """
    function_text, function_where = _text(
        settings.function_keys, settings.function_keys_secret, "FLOW_AUTH_FUNCTION_KEYS"
    )
    host_text, host_where = _text(
        settings.host_keys, settings.host_keys_secret, "FLOW_AUTH_HOST_KEYS"
    )
    function_keys = _parse_function_keys(function_text, function_where) if function_text else {}
    host_keys = _split_keys(host_text or "")
    _check_lengths(host_keys, host_where, function=None)
    return KeyRing.of(function_keys, host_keys)


def _text(value: Any, secret_name: str | None, variable: str) -> tuple[str | None, str]:
    """The raw text of a key source and how to name it in a message."""
    if secret_name:
        where = f"secret {secret_name!r} ({secret_source(secret_name)}, named by {variable}_SECRET)"
        return read_secret(secret_name), where
    return (value.get_secret_value() if value is not None else None), variable


def _parse_function_keys(text: str, where: str) -> dict[str, list[str]]:
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ConfigError(f"{where} must be a JSON object {_FUNCTION_KEYS_FORM}") from None
    keys: dict[str, list[str]] = {}
    for function, value in parsed.items():
        listed = [value] if isinstance(value, str) else value
        if not isinstance(listed, list) or not all(isinstance(k, str) for k in listed):
            raise ConfigError(
                f"{where}: the keys of a function must be a string or a list of strings",
                function=function,
            )
        _check_lengths(listed, where, function=function)
        keys[function] = listed
    return keys


def _split_keys(text: str) -> list[str]:
    return [key.strip() for key in text.split(",") if key.strip()]


def _check_lengths(keys: list[str], where: str, function: str | None) -> None:
    if any(len(key) < MIN_KEY_LENGTH for key in keys):
        raise ConfigError(
            f"{where}: a key is shorter than {MIN_KEY_LENGTH} characters; use long random "
            "keys (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')",
            function=function,
        )
