"""The base of every settings class: frozen, ``.env`` aware, and silent about values.

A missing or contradictory setting raises :class:`~producer_lib.errors.ConfigError` naming
the environment variable (``KAFKA_BOOTSTRAP_SERVERS is not set``), never pydantic's
``ValidationError``: that one echoes every input value, passwords included.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Self

from pydantic import SecretStr, ValidationError
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from producer_lib.errors import ConfigError

__all__ = ["MASK", "EnvSettings", "blank_is_unset", "env_name", "present", "reveal"]

MASK = "**********"
_PARSE_FAILURE = re.compile(r'field "(\w+)"')  # pydantic-settings names the field it cannot parse


class EnvSettings(BaseSettings):
    """Base of the settings classes: frozen, ``.env`` aware, and silent about values.

    A bad setting raises :class:`ConfigError` naming its environment variable; the message
    is built without the input values (pydantic's own error would print them, secrets
    included) and the ``ValidationError`` is not chained to it.
    """

    model_config = SettingsConfigDict(
        env_file=".env", extra="ignore", frozen=True, hide_input_in_errors=True
    )
    _what: ClassVar[str] = "settings"  # for the message: "invalid Kafka settings: ..."

    def __init__(self, **values: Any) -> None:
        """Read the settings; ``values`` (field names or variable names) win over the env.

        Raises:
            ConfigError: A setting is missing, malformed or contradicts another one.
        """
        try:
            super().__init__(**values)
            return
        except ValidationError as exc:
            problems = _describe_errors(type(self), exc)
        except SettingsError as exc:  # a JSON setting that does not parse
            found = _PARSE_FAILURE.search(str(exc))
            field = found.group(1) if found else ""
            problems = [f"{env_name(type(self), field)} is not valid JSON"]
        # Raised here, outside the except blocks, so no traceback chains the pydantic error.
        raise ConfigError(f"invalid {self._what}: {'; '.join(problems)}")

    @classmethod
    def from_env(cls) -> Self:
        """The settings as the environment (and ``.env``) gives them, nothing passed in.

        The same as calling the class without arguments; type checkers, which see the
        required fields as required arguments, accept this form.

        Raises:
            ConfigError: A setting is missing, malformed or contradicts another one.
        """
        return cls()


def env_name(settings: type[BaseSettings], field: str) -> str:
    """The environment variable of ``field`` of a settings class (its alias, else prefix+name)."""
    info = settings.model_fields.get(field)
    if info is not None and isinstance(info.validation_alias, str):
        return info.validation_alias
    if any(f.validation_alias == field for f in settings.model_fields.values()):
        return field  # pydantic reports an aliased field by its alias
    return f"{settings.model_config.get('env_prefix', '')}{field}".upper()


def _describe_errors(settings: type[BaseSettings], exc: ValidationError) -> list[str]:
    """One phrase per bad setting, naming its variable, without input values."""
    problems: dict[tuple[Any, ...], str] = {}
    for error in exc.errors(include_input=False, include_url=False, include_context=False):
        loc = error["loc"]
        message = error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        if not loc:  # a model validator: its message names the variables itself
            problems.setdefault((), message)
            continue
        name = env_name(settings, str(loc[0]))
        where = f"{name}[{loc[1]!r}]" if len(loc) > 1 else name
        if error["type"] == "missing":
            problems.setdefault(loc[:2], f"{where} is not set")
        else:  # a union reports every branch; its first one says enough
            problems.setdefault(loc[:2], f"{where}: {message}")
    return list(problems.values())


def present(value: str | SecretStr | None) -> bool:
    """True when ``value`` is set and not empty (a secret is looked at, never shown)."""
    if isinstance(value, SecretStr):
        return bool(value.get_secret_value())
    return bool(value)


def reveal(secret: SecretStr | None) -> str:
    """The secret's value for a client library's configuration; ``""`` when unset."""
    return secret.get_secret_value() if secret is not None else ""


def blank_is_unset(value: object) -> object:
    """A ``mode="before"`` validator: an empty or blank variable counts as not set.

    For settings that were read with ``os.environ.get(NAME, "").strip() or default`` before
    they became fields: ``NAME=`` keeps meaning the default.
    """
    if isinstance(value, str) and not value.strip():
        raise PydanticUseDefault()
    return value
