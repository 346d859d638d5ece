"""An Oracle login from one secret: :class:`OracleConnectionSettings`."""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from producer_lib.azure_utils import read_secret, secret_source
from producer_lib.errors import ConfigError

__all__ = ["OracleConnectionSettings"]


class OracleConnectionSettings(BaseModel):
    """How to reach an Oracle database, from one secret (see :func:`azure_utils.read_secret`).

    The secret's value is a JSON object ``{"user": ..., "password": ..., "dsn": ...}`` or a
    connect string ``user/password@dsn`` (the password may hold ``/`` and ``@``: the user
    ends at the first ``/``, the DSN starts after the last ``@``). ``dsn`` is what
    python-oracledb takes: ``host:port/service`` or a TNS alias or descriptor.

    Args:
        secret_name: Name of the secret, e.g. ``"Labware-Source"`` (Key Vault when
            ``AZURE_KEY_VAULT_URL`` is set, else ``SECRET_LABWARE_SOURCE``).

    Raises:
        ConfigError: The secret is missing or its value has neither form (the value is
            never part of the message).
    """

    model_config = ConfigDict(frozen=True, hide_input_in_errors=True)

    secret_name: str
    user: str = Field(min_length=1)
    password: SecretStr
    dsn: str = Field(min_length=1)

    def __init__(self, secret_name: str) -> None:  # noqa: D107 (documented on the class)
        fields = _parse_oracle_secret(secret_name, read_secret(secret_name))
        try:
            super().__init__(secret_name=secret_name, **fields)
            return
        except ValidationError as exc:
            bad = sorted({str(e["loc"][0]) for e in exc.errors(include_input=False) if e["loc"]})
        raise ConfigError(
            f"the Oracle secret has an empty or invalid {', '.join(bad)}: expected {_ORACLE_FORMS}",
            secret=secret_name,
            source=secret_source(secret_name),
        )


_ORACLE_KEYS = ("user", "password", "dsn")
_ORACLE_FORMS = '{"user": ..., "password": ..., "dsn": ...} or user/password@dsn'


def _parse_oracle_secret(secret_name: str, value: str) -> dict[str, str]:
    """``user``, ``password`` and ``dsn`` of an Oracle secret (JSON or user/password@dsn)."""
    text = value.strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            problem = "it starts with { but is not a JSON object"
        elif all(isinstance(parsed.get(k), str) for k in _ORACLE_KEYS):
            return {k: parsed[k] for k in _ORACLE_KEYS}
        else:  # name the expected keys only: a stray key might be a pasted password
            bad = [k for k in _ORACLE_KEYS if not isinstance(parsed.get(k), str)]
            problem = f"its JSON object lacks the string key(s) {', '.join(bad)}"
    else:
        user, slash, rest = text.partition("/")
        password, at, dsn = rest.rpartition("@")
        if slash and at:
            return {"user": user, "password": password, "dsn": dsn}
        problem = "no / before an @"
    raise ConfigError(
        f"the Oracle secret has neither accepted form ({problem}): expected {_ORACLE_FORMS}",
        secret=secret_name,
        source=secret_source(secret_name),
    )
