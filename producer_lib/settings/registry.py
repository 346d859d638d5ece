"""An optional Confluent-compatible Schema Registry: :class:`SchemaRegistrySettings`."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from producer_lib.errors import ConfigError
from producer_lib.settings.base import EnvSettings, blank_is_unset, present, reveal

__all__ = ["SchemaRegistrySettings"]


class SchemaRegistrySettings(EnvSettings):
    """An optional Confluent-compatible Schema Registry (env prefix ``SCHEMA_REGISTRY_``).

    Without ``SCHEMA_REGISTRY_URL`` schemas go to the embedded catalog topic
    ``schemas_topic``.

    Attributes:
        url: Registry URL (Confluent, Apicurio ``/apis/ccompat/v7``, Karapace, Redpanda).
        basic_auth_user: Basic auth user (``SCHEMA_REGISTRY_BASIC_AUTH_USER``).
        basic_auth_password: Basic auth password (secret).
        schemas_topic: The embedded catalog topic when no registry is configured
            (``FLOW_SCHEMAS_TOPIC``, for producer and writer alike).
    """

    model_config = SettingsConfigDict(env_prefix="SCHEMA_REGISTRY_")
    _what: ClassVar[str] = "schema registry settings"

    url: str | None = None
    basic_auth_user: str | None = None
    basic_auth_password: SecretStr | None = None
    schemas_topic: str = Field(
        default="_flow_schemas", min_length=1, validation_alias="FLOW_SCHEMAS_TOPIC"
    )

    _blank_is_unset = field_validator("schemas_topic", mode="before")(blank_is_unset)

    @model_validator(mode="after")
    def _check_auth(self) -> SchemaRegistrySettings:
        if bool(self.basic_auth_user) != present(self.basic_auth_password):
            raise ValueError(
                "SCHEMA_REGISTRY_BASIC_AUTH_USER and SCHEMA_REGISTRY_BASIC_AUTH_PASSWORD "
                "go together: set both or neither"
            )
        return self

    @property
    def configured(self) -> bool:
        """True when a registry URL is set."""
        return bool(self.url)

    def to_client_config(self) -> dict[str, str]:
        """Return the ``SchemaRegistryClient`` configuration (secrets revealed).

        Raises:
            ConfigError: No URL is configured.
        """
        if not self.url:
            raise ConfigError("no schema registry configured: set SCHEMA_REGISTRY_URL")
        conf = {"url": self.url}
        if self.basic_auth_user:
            conf["basic.auth.user.info"] = (
                f"{self.basic_auth_user}:{reveal(self.basic_auth_password)}"
            )
        return conf
