"""How to reach Kafka: :class:`KafkaSettings` (``KAFKA_*``).

Secrets are :class:`~pydantic.SecretStr`; only :meth:`KafkaSettings.to_librdkafka` reveals
them, to hand them to librdkafka. ``overrides`` (raw librdkafka keys) may carry secrets too and
are never shown.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, SecretStr, field_serializer, model_validator
from pydantic_settings import SettingsConfigDict

from producer_lib.settings.base import MASK, EnvSettings, present, reveal

__all__ = ["KafkaSecretSettings", "KafkaSettings"]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
OverrideValue = str | int | float | bool
_SECRET_KEY = re.compile(r"password|secret|jaas|token|key", re.IGNORECASE)  # override keys to hide


class KafkaSettings(EnvSettings):
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
        topic_retention_ms: ``retention.ms`` of data topics the producer creates (-1: keep
            forever); 7 days by default. The writer must read a row before it expires.
        connect_timeout_s: Bound on reaching the cluster when a producer starts.
        transaction_timeout_ms: Broker-side bound on one transaction (capped by the broker's
            ``transaction.max.timeout.ms``).
        encode_process_after_rows: Rows of one export encoded in the flow's own thread; past
            them the rest is encoded in a helper process beside the send loop (started once
            per Python process). -1: never.
        overrides: Further librdkafka settings by dotted key (``KAFKA_OVERRIDES`` as JSON);
            they win over everything else.
    """

    model_config = SettingsConfigDict(env_prefix="KAFKA_")
    _what: ClassVar[str] = "Kafka settings"

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
    topic_retention_ms: int = Field(default=7 * 24 * 3600 * 1000, ge=-1)
    connect_timeout_s: float = Field(default=15.0, gt=0)
    transaction_timeout_ms: int = Field(default=60_000, ge=1_000)
    encode_process_after_rows: int = Field(default=200_000, ge=-1)
    overrides: dict[str, OverrideValue] = Field(default_factory=dict, repr=False)

    def secret_overrides(self) -> list[str]:
        """Values of ``overrides`` under secret-looking keys (for redaction, never shown)."""
        return [str(v) for k, v in self.overrides.items() if _SECRET_KEY.search(k)]

    @field_serializer("overrides")
    def _mask_overrides(self, overrides: dict[str, OverrideValue]) -> dict[str, OverrideValue]:
        return {key: MASK if _SECRET_KEY.search(key) else value for key, value in overrides.items()}

    @model_validator(mode="after")
    def _check_security(self) -> KafkaSettings:
        # The messages name variables and the closed-set values of protocol and mechanism
        # only: a model validator's message reaches users verbatim.
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and self.sasl_mechanism is None:
            raise ValueError(
                f"KAFKA_SECURITY_PROTOCOL={self.security_protocol} needs KAFKA_SASL_MECHANISM "
                "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)"
            )
        if not sasl and self.sasl_mechanism is not None:
            now = (
                f"it is {self.security_protocol}"
                if "security_protocol" in self.model_fields_set
                else "KAFKA_SECURITY_PROTOCOL is not set"
            )
            raise ValueError(
                f"KAFKA_SASL_MECHANISM={self.sasl_mechanism} needs KAFKA_SECURITY_PROTOCOL "
                f"SASL_PLAINTEXT or SASL_SSL ({now})"
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
        return [name for name, value in needed.items() if not present(value)]

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
            conf["sasl.password"] = reveal(self.sasl_password)
        conf.update(self.overrides)
        return conf

    def _oauth_conf(self) -> dict[str, OverrideValue]:
        conf: dict[str, OverrideValue] = {
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": self.oauth_token_endpoint_url or "",
            "sasl.oauthbearer.client.id": self.oauth_client_id or "",
            "sasl.oauthbearer.client.secret": reveal(self.oauth_client_secret),
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
