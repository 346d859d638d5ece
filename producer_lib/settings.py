"""Settings of the external systems producer_lib talks to, read from the environment.

Quickstart::

    from producer_lib.settings import KafkaSettings, SchemaRegistrySettings, get_environment

    kafka = KafkaSettings()              # KAFKA_BOOTSTRAP_SERVERS, KAFKA_SECURITY_PROTOCOL, ...
    conf = kafka.to_librdkafka()         # {"bootstrap.servers": ..., "sasl.mechanism": ...}
    registry = SchemaRegistrySettings()  # SCHEMA_REGISTRY_URL (optional), basic auth
    oracle = OracleConnectionSettings("Labware-Source")  # user, password, dsn from a secret
    environment = get_environment()      # FLOW_ENVIRONMENT, e.g. "dev"

Each class is a frozen pydantic-settings model (a ``.env`` file in the working directory
works too). Secrets are :class:`~pydantic.SecretStr`: ``repr``/``str`` show ``**********``
and only :meth:`KafkaSettings.to_librdkafka` / :meth:`SchemaRegistrySettings.to_client_config`
reveal them, to hand them to the client libraries. ``overrides`` (raw librdkafka keys) may
carry secrets too and are never shown.

A missing or contradictory setting raises :class:`~producer_lib.errors.ConfigError` naming
the environment variable (``KAFKA_BOOTSTRAP_SERVERS is not set``), never pydantic's
``ValidationError``: that one echoes every input value, passwords included.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_serializer,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from producer_lib.azure_utils import read_secret, secret_source
from producer_lib.errors import ConfigError

__all__ = [
    "EnvSettings",
    "FlowSettings",
    "KafkaSecretSettings",
    "KafkaSettings",
    "OracleConnectionSettings",
    "SchemaRegistrySettings",
    "get_environment",
]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
OverrideValue = str | int | float | bool
_SECRET_KEY = re.compile(r"password|secret|jaas|token|key", re.IGNORECASE)  # override keys to hide
_MASK = "**********"
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
        return {
            key: _MASK if _SECRET_KEY.search(key) else value for key, value in overrides.items()
        }

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


class SchemaRegistrySettings(EnvSettings):
    """An optional Confluent-compatible Schema Registry (env prefix ``SCHEMA_REGISTRY_``).

    Without ``SCHEMA_REGISTRY_URL`` schemas go to the embedded ``_flow_schemas`` topic. The
    producer and the lakehouse writer read the same variables: whatever logs one in logs the
    other in.

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

    @model_validator(mode="after")
    def _check_auth(self) -> SchemaRegistrySettings:
        if bool(self.basic_auth_user) != _present(self.basic_auth_password):
            raise ValueError(
                "SCHEMA_REGISTRY_BASIC_AUTH_USER and SCHEMA_REGISTRY_BASIC_AUTH_PASSWORD "
                "go together: set both or neither"
            )
        if self.basic_auth_user and _present(self.bearer_auth_token):
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
        if _present(self.bearer_auth_token):
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
                f"{self.basic_auth_user}:{_reveal(self.basic_auth_password)}"
            )
        if _present(self.bearer_auth_token):
            conf["bearer.auth.credentials.source"] = "STATIC_TOKEN"
            conf["bearer.auth.token"] = _reveal(self.bearer_auth_token)
            conf["bearer.auth.logical.cluster"] = self.bearer_auth_logical_cluster
            if self.bearer_auth_identity_pool_id:
                conf["bearer.auth.identity.pool.id"] = self.bearer_auth_identity_pool_id
        tls = {
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
            "ssl.key.password": _reveal(self.ssl_key_password) or None,
        }
        conf.update({key: value for key, value in tls.items() if value})
        return conf


def _present(value: str | SecretStr | None) -> bool:
    if isinstance(value, SecretStr):
        return bool(value.get_secret_value())
    return bool(value)


def _reveal(secret: SecretStr | None) -> str:
    return secret.get_secret_value() if secret is not None else ""


def _default_environment() -> str:
    return os.environ.get("AZURE_FUNCTIONS_ENVIRONMENT", "").strip().lower() or "dev"


class FlowSettings(EnvSettings):
    """Where a flow runs (env prefix ``FLOW_``), for runners that build their own producer.

    Attributes:
        environment: Deployment environment, part of every transactional id: see
            :func:`get_environment`.
    """

    model_config = SettingsConfigDict(env_prefix="FLOW_")
    _what: ClassVar[str] = "flow settings"

    environment: str = Field(
        default_factory=_default_environment, min_length=1, pattern=r"^[A-Za-z0-9_-]+$"
    )


def get_environment() -> str:
    """The deployment environment (``dev``, ``test``, ``prod``...), KafkaProducer's 4th argument.

    The rule: ``FLOW_ENVIRONMENT`` (environment or ``.env``) when set; else the Azure
    Functions host's ``AZURE_FUNCTIONS_ENVIRONMENT`` in lower case (``Development`` ->
    ``development``); else ``dev``. Letters, digits, ``_`` and ``-`` only: it becomes part of
    the producer's transactional id. The runner's own producer uses the same value.

    Raises:
        ConfigError: The value has other characters.
    """
    return FlowSettings().environment


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
