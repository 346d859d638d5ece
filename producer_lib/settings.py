"""Settings of the external systems producer_lib talks to, read from the environment.

Quickstart::

    from producer_lib.settings import KafkaSettings, SchemaRegistrySettings

    kafka = KafkaSettings()              # KAFKA_BOOTSTRAP_SERVERS, KAFKA_SECURITY_PROTOCOL, ...
    conf = kafka.to_librdkafka()         # {"bootstrap.servers": ..., "sasl.mechanism": ...}
    registry = SchemaRegistrySettings()  # SCHEMA_REGISTRY_URL (optional), basic auth

Each class is a frozen pydantic-settings model (a ``.env`` file in the working directory
works too). Secrets are :class:`~pydantic.SecretStr`: ``repr``/``str`` show ``**********``
and only :meth:`KafkaSettings.to_librdkafka` / :meth:`SchemaRegistrySettings.to_client_config`
reveal them, to hand them to the client libraries. ``overrides`` (raw librdkafka keys) may
carry secrets too and are never shown.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_serializer, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from producer_lib.errors import ConfigError

__all__ = ["KafkaSecretSettings", "KafkaSettings", "SchemaRegistrySettings"]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
OverrideValue = str | int | float | bool
_SECRET_KEY = re.compile(r"password|secret|jaas|token|key", re.IGNORECASE)  # override keys to hide
_MASK = "**********"


class KafkaSettings(BaseSettings):
    """How to reach Kafka (env prefix ``KAFKA_``).

    Attributes:
        bootstrap_servers: ``host:port[,host:port...]`` (``KAFKA_BOOTSTRAP_SERVERS``).
        security_protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
        sasl_mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER; required with a
            SASL protocol.
        sasl_username: User of PLAIN and SCRAM.
        sasl_password: Password of PLAIN and SCRAM (secret).
        ssl_ca_location: CA bundle that signed the brokers' certificates (SSL, SASL_SSL).
        oauth_token_endpoint_url: OIDC token endpoint (OAUTHBEARER, client-credentials flow).
        oauth_client_id: OIDC client id (OAUTHBEARER).
        oauth_client_secret: OIDC client secret (OAUTHBEARER, secret).
        oauth_scope: OIDC scope, optional.
        topic_partitions: Partitions of topics the producer creates.
        topic_replication_factor: Replicas of created topics; -1 takes the broker default.
        connect_timeout_s: Bound on reaching the cluster when a producer starts.
        transaction_timeout_ms: Broker-side bound on one transaction (capped by the broker's
            ``transaction.max.timeout.ms``).
        overrides: Further librdkafka settings by dotted key (``KAFKA_OVERRIDES`` as JSON);
            they win over everything else.
    """

    model_config = SettingsConfigDict(
        env_prefix="KAFKA_", env_file=".env", extra="ignore", frozen=True
    )

    bootstrap_servers: str = Field(min_length=1)
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: str | None = None
    oauth_token_endpoint_url: str | None = None
    oauth_client_id: str | None = None
    oauth_client_secret: SecretStr | None = None
    oauth_scope: str | None = None
    topic_partitions: int = Field(default=1, ge=1)
    topic_replication_factor: int = Field(default=-1, ge=-1)
    connect_timeout_s: float = Field(default=15.0, gt=0)
    transaction_timeout_ms: int = Field(default=60_000, ge=1_000)
    overrides: dict[str, OverrideValue] = Field(default_factory=dict, repr=False)

    @field_serializer("overrides")
    def _mask_overrides(self, overrides: dict[str, OverrideValue]) -> dict[str, OverrideValue]:
        return {key: _MASK if _SECRET_KEY.search(key) else value
                for key, value in overrides.items()}  # fmt: skip

    @model_validator(mode="after")
    def _check_security(self) -> KafkaSettings:
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and self.sasl_mechanism is None:
            raise ValueError(
                f"KAFKA_SECURITY_PROTOCOL={self.security_protocol} needs KAFKA_SASL_MECHANISM "
                "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)"
            )
        if not sasl and self.sasl_mechanism is not None:
            raise ValueError(
                f"KAFKA_SASL_MECHANISM={self.sasl_mechanism} needs KAFKA_SECURITY_PROTOCOL "
                f"SASL_SSL or SASL_PLAINTEXT, not {self.security_protocol}"
            )
        missing = self._missing_credentials()
        if missing:
            raise ValueError(
                f"KAFKA_SASL_MECHANISM={self.sasl_mechanism} needs {', '.join(missing)}"
            )
        return self

    def _missing_credentials(self) -> list[str]:
        if self.sasl_mechanism is None:
            return []
        if self.sasl_mechanism == "OAUTHBEARER":
            needed = {
                "KAFKA_OAUTH_TOKEN_ENDPOINT_URL": self.oauth_token_endpoint_url,
                "KAFKA_OAUTH_CLIENT_ID": self.oauth_client_id,
                "KAFKA_OAUTH_CLIENT_SECRET": self.oauth_client_secret,
            }
        else:
            needed = {
                "KAFKA_SASL_USERNAME": self.sasl_username,
                "KAFKA_SASL_PASSWORD": self.sasl_password,
            }
        return [name for name, value in needed.items() if not _present(value)]

    def to_librdkafka(self) -> dict[str, OverrideValue]:
        """Return the client settings as librdkafka dotted keys (secrets revealed).

        Never log the result; log :meth:`describe` instead.
        """
        conf: dict[str, OverrideValue] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
        }
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        if self.sasl_mechanism == "OAUTHBEARER":
            conf.update(self._oauth_conf())
        elif self.sasl_mechanism is not None:
            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.username"] = self.sasl_username or ""
            conf["sasl.password"] = _reveal(self.sasl_password)
        conf.update(self.overrides)
        return conf

    def _oauth_conf(self) -> dict[str, OverrideValue]:
        conf: dict[str, OverrideValue] = {
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": self.oauth_token_endpoint_url or "",
            "sasl.oauthbearer.client.id": self.oauth_client_id or "",
            "sasl.oauthbearer.client.secret": _reveal(self.oauth_client_secret),
        }
        if self.oauth_scope:
            conf["sasl.oauthbearer.scope"] = self.oauth_scope
        return conf

    def describe(self) -> str:
        """A one-line, secret-free description for logs and error messages."""
        parts = [
            f"bootstrap_servers={self.bootstrap_servers}",
            f"security_protocol={self.security_protocol}",
        ]
        if self.sasl_mechanism:
            parts.append(f"sasl_mechanism={self.sasl_mechanism}")
        if self.sasl_username:
            parts.append(f"sasl_username={self.sasl_username}")
        return " ".join(parts)


class KafkaSecretSettings(KafkaSettings):
    """The name flows use for :class:`KafkaSettings` (same fields, same ``KAFKA_`` prefix)."""


class SchemaRegistrySettings(BaseSettings):
    """An optional Confluent-compatible Schema Registry (env prefix ``SCHEMA_REGISTRY_``).

    Without ``SCHEMA_REGISTRY_URL`` schemas go to the embedded ``_schemas`` topic.

    Attributes:
        url: Registry URL (Confluent, Apicurio ``/apis/ccompat/v7``, Karapace, Redpanda).
        basic_auth_user: Basic auth user (``SCHEMA_REGISTRY_BASIC_AUTH_USER``).
        basic_auth_password: Basic auth password (secret).
    """

    model_config = SettingsConfigDict(
        env_prefix="SCHEMA_REGISTRY_", env_file=".env", extra="ignore", frozen=True
    )

    url: str | None = None
    basic_auth_user: str | None = None
    basic_auth_password: SecretStr | None = None

    @model_validator(mode="after")
    def _check_auth(self) -> SchemaRegistrySettings:
        if bool(self.basic_auth_user) != _present(self.basic_auth_password):
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
                f"{self.basic_auth_user}:{_reveal(self.basic_auth_password)}"
            )
        return conf


def _present(value: str | SecretStr | None) -> bool:
    if isinstance(value, SecretStr):
        return bool(value.get_secret_value())
    return bool(value)


def _reveal(secret: SecretStr | None) -> str:
    return secret.get_secret_value() if secret is not None else ""


class FlowSettings(BaseSettings):
    """Where a flow runs (env prefix ``FLOW_``), for runners that build their own producer.

    Attributes:
        environment: Deployment environment, part of every transactional id
            (``FLOW_ENVIRONMENT``, e.g. ``dev``, ``prod``).
    """

    model_config = SettingsConfigDict(env_prefix="FLOW_", env_file=".env", extra="ignore",
                                      frozen=True)  # fmt: skip

    environment: str = Field(default="dev", min_length=1, pattern=r"^[A-Za-z0-9_-]+$")
