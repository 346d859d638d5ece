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
    ``schemas_topic``. The producer and the lakehouse writer read the same variables:
    whatever logs one in logs the other in.

    Attributes:
        url: Registry URL (Confluent, Apicurio ``/apis/ccompat/v7``, Karapace, Redpanda).
        basic_auth_user: Basic auth user (``SCHEMA_REGISTRY_BASIC_AUTH_USER``; Confluent
            Cloud: the API key).
        basic_auth_password: Basic auth password (secret; Confluent Cloud: the API secret).
        bearer_auth_token: A bearer token sent as ``Authorization: Bearer`` (secret), for a
            registry behind an OAuth proxy; not with basic auth.
        bearer_auth_logical_cluster: Confluent Cloud's logical cluster id (``lsrc-...``) sent
            with the token (``target-sr-cluster``); other registries ignore it.
        bearer_auth_identity_pool_id: Confluent Cloud's identity pool, sent with the token.
        ssl_ca_location: CA bundle (PEM) that signed the registry's TLS certificate.
        ssl_certificate_location: Client certificate (PEM) for mutual TLS.
        ssl_key_location: Its private key (PEM).
        ssl_key_password: The private key's password (secret).
        schemas_topic: The embedded catalog topic when no registry is configured
            (``FLOW_SCHEMAS_TOPIC``, for producer and writer alike).
    """

    model_config = SettingsConfigDict(env_prefix="SCHEMA_REGISTRY_")
    _what: ClassVar[str] = "schema registry settings"

    url: str | None = None
    basic_auth_user: str | None = None
    basic_auth_password: SecretStr | None = None
    bearer_auth_token: SecretStr | None = None
    bearer_auth_logical_cluster: str = ""
    bearer_auth_identity_pool_id: str | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: SecretStr | None = None
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
        if self.basic_auth_user and present(self.bearer_auth_token):
            raise ValueError(
                "SCHEMA_REGISTRY_BASIC_AUTH_USER and SCHEMA_REGISTRY_BEARER_AUTH_TOKEN are "
                "two ways to log in: set one"
            )
        if self.ssl_key_location and not self.ssl_certificate_location:
            raise ValueError(
                "SCHEMA_REGISTRY_SSL_KEY_LOCATION needs SCHEMA_REGISTRY_SSL_CERTIFICATE_LOCATION"
            )
        return self

    @property
    def configured(self) -> bool:
        """True when a registry URL is set."""
        return bool(self.url)

    @property
    def login(self) -> str:
        """The settings that log in, by name (for messages; no values)."""
        if self.basic_auth_user:
            return "SCHEMA_REGISTRY_BASIC_AUTH_USER/SCHEMA_REGISTRY_BASIC_AUTH_PASSWORD"
        if present(self.bearer_auth_token):
            return "SCHEMA_REGISTRY_BEARER_AUTH_TOKEN"
        return "none set (SCHEMA_REGISTRY_BASIC_AUTH_USER/_PASSWORD or _BEARER_AUTH_TOKEN)"

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
        if present(self.bearer_auth_token):
            conf["bearer.auth.credentials.source"] = "STATIC_TOKEN"
            conf["bearer.auth.token"] = reveal(self.bearer_auth_token)
            conf["bearer.auth.logical.cluster"] = self.bearer_auth_logical_cluster
            if self.bearer_auth_identity_pool_id:
                conf["bearer.auth.identity.pool.id"] = self.bearer_auth_identity_pool_id
        tls = {
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
            "ssl.key.password": reveal(self.ssl_key_password) or None,
        }
        conf.update({key: value for key, value in tls.items() if value})
        return conf
