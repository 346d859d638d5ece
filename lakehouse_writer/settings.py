"""Settings of the lakehouse writer, read from the environment (or a ``.env`` file).

Quickstart::

    settings = LakehouseSettings()                     # LAKEHOUSE_PATH=... etc.
    settings = LakehouseSettings(lakehouse_path="/data/lake", checkpoint_path="/data/ckpt")

Kafka and the schema registry are reached with producer_lib's own settings
(:class:`~producer_lib.settings.KafkaSettings`, ``KAFKA_*``;
:class:`~producer_lib.settings.SchemaRegistrySettings`, ``SCHEMA_REGISTRY_*``): the writer
refuses what the producer refuses, and a bad setting raises
:class:`~producer_lib.errors.ConfigError` naming the variable, never its value.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

from pydantic import AliasChoices, Field, PrivateAttr, field_validator

from lakehouse_writer.tables.features import (
    FeatureConflict,
    ReaderPolicy,
    parse_readers,
    reader_policy,
)
from lakehouse_writer.tables.retention import MaintainSettings
from producer_lib.errors import ConfigError
from producer_lib.settings import EnvSettings, KafkaSettings, SchemaRegistrySettings
from producer_lib.settings.base import blank_is_unset

# Kafka's own internal topics start with "__"; `_schemas` holds the catalog, not rows.
DEFAULT_TOPICS_REGEX = r"(?!__|_flow_schemas$|_schemas$).+"
_KAFKA_PREFIX = "KAFKA_"
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
_LIBRDKAFKA_LOG = logging.getLogger("lakehouse_writer.librdkafka")
# The client-credentials flow of the Java client (kafka-clients 3.4+, 4.x).
_OAUTH_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


class LakehouseSettings(EnvSettings):
    """Where the writer reads from and writes to, and how big its micro-batches are.

    Every ``KAFKA_*`` variable of :class:`~producer_lib.settings.KafkaSettings` applies
    (security protocol, SASL, OAuth, CA bundle); ``KAFKA_*`` keyword arguments (variable
    names) are handed to it, and ``kafka=`` takes a ready one.

    Attributes:
        lakehouse_path: Root of the Delta tables (``LAKEHOUSE_PATH``); a relative local path
            is made absolute (Delta's SQL cannot name a table by a relative path).
        checkpoint_path: Streaming checkpoint (``LAKEHOUSE_CHECKPOINT_PATH``); likewise.
        kafka_bootstrap_servers: ``KAFKA_BOOTSTRAP_SERVERS``; the devstack broker by default.
        schema_registry_url: ``SCHEMA_REGISTRY_URL``; Confluent-framed rows need it.
        topics_regex: Java regex of the topics to subscribe to (``LAKEHOUSE_TOPICS_REGEX``).
        trigger_interval_s: Seconds between micro-batches (``LAKEHOUSE_TRIGGER_INTERVAL_S``).
        max_offsets_per_trigger: Bound of one batch; None reads all that is there.
        reload_one_pass_min_rows: A batch with at least this many offsets of one topic that
            looks like a reload into an empty table is written in the pass that reads it
            (:mod:`lakehouse_writer.engines.spark.reload`; ``LAKEHOUSE_RELOAD_ONE_PASS_MIN_ROWS``);
            0: never.
        small_merge_rows: A table's batch of at most this many rows is applied by delta-rs in
            the driver, not by Spark (:mod:`lakehouse_writer.route.router`;
            ``LAKEHOUSE_SMALL_MERGE_ROWS``), and, where its rows allow, decoded there too
            (:mod:`lakehouse_writer.route.driver_tables`); also the most rows the driver
            holds at once for that. 0: never.
        driver_read_rows: A batch of at most this many messages, none of whose topics has
            more than ``small_merge_rows``, is read into the driver whole by a Kafka
            consumer instead of a Spark job (:mod:`lakehouse_writer.read.driver_read`;
            ``LAKEHOUSE_DRIVER_READ_ROWS``): what the driver's Python process holds of the
            batch at once. 0: never.
        readers: Who must read the tables (``LAKEHOUSE_READERS``): one or more of
            ``fabric``, ``databricks``, ``open``, comma-separated; the writer then gives
            tables only the Delta reader features all of them read, and stops a table that
            would need another (:mod:`lakehouse_writer.tables.features`, ``docs/TABLES.md``
            "Reader profiles"). Unset: every feature the writer's Delta has.
        deletion_vectors: Create new tables with deletion vectors
            (``LAKEHOUSE_DELETION_VECTORS``; unset: on unless ``LAKEHOUSE_READERS`` names a
            reader that cannot apply them): a MERGE or DELETE then marks rows deleted instead
            of rewriting their files. ``true`` with such a reader is refused at start. Tables
            that exist keep the features they have: turning it off does not take deletion
            vectors out of a table created with them (``ALTER TABLE ... DROP FEATURE
            deletionVectors`` does).
        schemas_topic: The schema catalog topic (``_flow_schemas``; ``LAKEHOUSE_SCHEMAS_TOPIC``
            or the producer's ``FLOW_SCHEMAS_TOPIC``). Its old name ``_schemas`` is read for
            schemas the catalog lacks.
        commits_topic: Commit records (``_commits``).
        execution_log_topic: Run records (``_execution_log``).
        lineage_topic: Lineage documents (``_lineage``).
        connect_timeout_s: Seconds Kafka has to answer when the writer starts
            (``LAKEHOUSE_CONNECT_TIMEOUT_S``; ``run --connect-timeout``).
        apply_workers: Tables of a batch created, decoded and applied at once, each on its
            own thread and session clone (``LAKEHOUSE_APPLY_WORKERS``).
        spark_master: The Spark master when neither ``--master``, ``spark-submit`` nor
            ``spark-defaults.conf`` gives one (``SPARK_MASTER``); else ``local[2]``.
        metrics_port: Serve Prometheus text at ``/metrics`` on this port
            (``LAKEHOUSE_METRICS_PORT``); unset or 0: no endpoint.
        metrics_host: The address the metrics endpoint listens on (``LAKEHOUSE_METRICS_HOST``).
        monitor_group: The consumer group the writer commits its end offsets to, for
            monitoring only (``LAKEHOUSE_MONITOR_GROUP``); unset: ``lakehouse-writer-<instance
            id>``; ``off``: none.
        maintain_interval_s: Seconds between the starts of two maintenance passes a running
            writer makes between batches (``LAKEHOUSE_MAINTAIN_INTERVAL_S``); unset: never.
        maintain_budget_s: No table is started once a pass between batches has run this long
            (``LAKEHOUSE_MAINTAIN_BUDGET_S``).
        history_retention_hours: Old versions are kept this long unless a table's
            ``flow.retention_period`` is shorter (``LAKEHOUSE_HISTORY_RETENTION_HOURS``).
        gdpr_completion_hours: A GDPR delete is gone from every file of its table at the
            first maintenance pass this many hours after it
            (``LAKEHOUSE_GDPR_COMPLETION_HOURS``).
        tombstone_retention_hours: A delete's tombstone (the key and its change time, so an
            older row arriving later loses) is removed by the first maintenance pass this many
            hours after the delete's change time (``LAKEHOUSE_TOMBSTONE_RETENTION_HOURS``).
        small_file_bytes: A data file smaller than this is small; only small files are
            compacted (``LAKEHOUSE_SMALL_FILE_BYTES``).
        compact_min_files: A table is compacted when it has at least this many small files
            (``LAKEHOUSE_COMPACT_MIN_FILES``; 0: never).
        catalog: Register every table by name in this Spark catalog (``LAKEHOUSE_CATALOG``):
            ``spark_catalog`` (the session's: a Hive metastore, AWS Glue) or a Unity Catalog
            name; unset or empty: no registration (:mod:`lakehouse_writer.tables.catalog`,
            ``docs/CATALOG.md``). With ``spark_catalog`` a session the writer starts itself
            gets Hive support unless ``--conf spark.sql.catalogImplementation`` says otherwise.
        catalog_system_namespace: The namespace the system tables (``_commits``...) are
            registered under (``LAKEHOUSE_CATALOG_SYSTEM_NAMESPACE``).
    """

    _what: ClassVar[str] = "writer settings"

    lakehouse_path: str = Field("lakehouse", validation_alias="LAKEHOUSE_PATH")
    checkpoint_path: str = Field(
        "lakehouse_checkpoint", validation_alias="LAKEHOUSE_CHECKPOINT_PATH"
    )
    kafka_bootstrap_servers: str = Field(
        "127.0.0.1:19092", min_length=1, validation_alias="KAFKA_BOOTSTRAP_SERVERS"
    )
    schema_registry_url: str | None = Field(None, validation_alias="SCHEMA_REGISTRY_URL")
    topics_regex: str = Field(DEFAULT_TOPICS_REGEX, validation_alias="LAKEHOUSE_TOPICS_REGEX")
    trigger_interval_s: float = Field(10.0, validation_alias="LAKEHOUSE_TRIGGER_INTERVAL_S")
    max_offsets_per_trigger: int | None = Field(
        None, validation_alias="LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER"
    )
    reload_one_pass_min_rows: int = Field(
        50_000, ge=0, validation_alias="LAKEHOUSE_RELOAD_ONE_PASS_MIN_ROWS"
    )
    small_merge_rows: int = Field(200_000, ge=0, validation_alias="LAKEHOUSE_SMALL_MERGE_ROWS")
    driver_read_rows: int = Field(500_000, ge=0, validation_alias="LAKEHOUSE_DRIVER_READ_ROWS")
    readers: str = Field("", validation_alias="LAKEHOUSE_READERS")
    deletion_vectors: bool | None = Field(None, validation_alias="LAKEHOUSE_DELETION_VECTORS")
    schemas_topic: str = Field(
        "_flow_schemas",
        validation_alias=AliasChoices("LAKEHOUSE_SCHEMAS_TOPIC", "FLOW_SCHEMAS_TOPIC"),
    )
    commits_topic: str = Field("_commits", validation_alias="LAKEHOUSE_COMMITS_TOPIC")
    execution_log_topic: str = Field(
        "_execution_log", validation_alias="LAKEHOUSE_EXECUTION_LOG_TOPIC"
    )
    lineage_topic: str = Field("_lineage", validation_alias="LAKEHOUSE_LINEAGE_TOPIC")
    connect_timeout_s: float = Field(
        30.0, gt=0, allow_inf_nan=False, validation_alias="LAKEHOUSE_CONNECT_TIMEOUT_S"
    )
    # On two cores 4 keeps both busy while the driver plans and commits (docs/PERFORMANCE.md).
    apply_workers: int = Field(4, ge=1, validation_alias="LAKEHOUSE_APPLY_WORKERS")
    spark_master: str | None = Field(None, validation_alias="SPARK_MASTER")
    metrics_port: int | None = Field(
        None, ge=0, le=65535, validation_alias="LAKEHOUSE_METRICS_PORT"
    )
    metrics_host: str = Field("0.0.0.0", min_length=1, validation_alias="LAKEHOUSE_METRICS_HOST")
    monitor_group: str | None = Field(None, validation_alias="LAKEHOUSE_MONITOR_GROUP")
    maintain_interval_s: float | None = Field(
        None, ge=0, allow_inf_nan=False, validation_alias="LAKEHOUSE_MAINTAIN_INTERVAL_S"
    )
    maintain_budget_s: float = Field(
        30.0, ge=0, allow_inf_nan=False, validation_alias="LAKEHOUSE_MAINTAIN_BUDGET_S"
    )
    # Delta's own default history: 7 days.
    history_retention_hours: float = Field(
        168.0, ge=0, allow_inf_nan=False, validation_alias="LAKEHOUSE_HISTORY_RETENTION_HOURS"
    )
    gdpr_completion_hours: float = Field(
        24.0, ge=0, allow_inf_nan=False, validation_alias="LAKEHOUSE_GDPR_COMPLETION_HOURS"
    )
    # As long as a change topic keeps its rows (producer_lib's default: 7 days).
    tombstone_retention_hours: float = Field(
        168.0, ge=0, allow_inf_nan=False, validation_alias="LAKEHOUSE_TOMBSTONE_RETENTION_HOURS"
    )
    small_file_bytes: int = Field(32 << 20, ge=0, validation_alias="LAKEHOUSE_SMALL_FILE_BYTES")
    compact_min_files: int = Field(16, ge=0, validation_alias="LAKEHOUSE_COMPACT_MIN_FILES")
    catalog: str | None = Field(None, validation_alias="LAKEHOUSE_CATALOG")
    catalog_system_namespace: str = Field(
        "lakehouse_system", min_length=1, validation_alias="LAKEHOUSE_CATALOG_SYSTEM_NAMESPACE"
    )
    _kafka: KafkaSettings = PrivateAttr()

    # These were read with os.environ.get(...) before, where an empty value meant the default.
    _blank_is_unset = field_validator(
        "connect_timeout_s",
        "apply_workers",
        "spark_master",
        "maintain_interval_s",
        "maintain_budget_s",
        "history_retention_hours",
        "gdpr_completion_hours",
        "tombstone_retention_hours",
        "small_file_bytes",
        "compact_min_files",
        "deletion_vectors",
        "catalog",  # LAKEHOUSE_CATALOG= turns registration off
        "catalog_system_namespace",
        "schemas_topic",  # FLOW_SCHEMAS_TOPIC= means _flow_schemas, as on the producer's side
        mode="before",
    )(blank_is_unset)

    @field_validator("lakehouse_path", "checkpoint_path")
    @classmethod
    def _absolute(cls, path: str) -> str:
        """``./lake`` -> ``/current/dir/lake``; URIs (``abfss://``, ``file:``) stay as given."""
        if ":" in path or Path(path).is_absolute():
            return path
        return str(Path(path).resolve())

    _registry: SchemaRegistrySettings = PrivateAttr()
    _readers: ReaderPolicy = PrivateAttr()

    def __init__(self, kafka: KafkaSettings | None = None, **values: Any) -> None:
        """Read the settings; ``values`` win over the environment.

        Raises:
            ConfigError: A writer, Kafka or registry setting is missing or inconsistent.
        """
        kafka_values = {
            key.removeprefix(_KAFKA_PREFIX).lower(): values.pop(key)
            for key in [k for k in values if k.startswith(_KAFKA_PREFIX)]
            if key != "KAFKA_BOOTSTRAP_SERVERS"
        }
        super().__init__(**values)
        self._kafka = kafka or KafkaSettings(
            bootstrap_servers=self.kafka_bootstrap_servers, **kafka_values
        )
        url = self.schema_registry_url
        self._registry = SchemaRegistrySettings(url=url) if url else SchemaRegistrySettings()
        try:
            self._readers = reader_policy(parse_readers(self.readers), self.deletion_vectors)
        except FeatureConflict as exc:  # a setting the readers refuse: refused at start
            raise ConfigError(str(exc)) from exc

    @property
    def reader_policy(self) -> ReaderPolicy:
        """The table features the readers of ``LAKEHOUSE_READERS`` allow.

        Deletion vectors as ``LAKEHOUSE_DELETION_VECTORS`` says, checked against them.
        """
        return self._readers

    @property
    def kafka(self) -> KafkaSettings:
        """The Kafka connection (producer_lib's settings, validated the same way)."""
        return self._kafka

    @property
    def maintain(self) -> MaintainSettings:
        """How a maintenance pass treats the tables (``LAKEHOUSE_HISTORY_RETENTION_HOURS``...)."""
        return MaintainSettings(
            history_retention_hours=self.history_retention_hours,
            gdpr_completion_hours=self.gdpr_completion_hours,
            tombstone_retention_hours=self.tombstone_retention_hours,
            small_file_bytes=self.small_file_bytes,
            compact_min_files=self.compact_min_files,
        )

    @property
    def registry(self) -> SchemaRegistrySettings:
        """The schema registry connection (``SCHEMA_REGISTRY_*``)."""
        return self._registry

    def kafka_client_conf(self) -> dict[str, Any]:
        """Librdkafka settings (dotted keys, secrets revealed) for the driver-side clients.

        librdkafka's own log lines go to the ``lakehouse_writer.librdkafka`` logger, so they
        come out in ``LOG_FORMAT`` like the writer's (without it, librdkafka prints to stderr).
        """
        return {"logger": _LIBRDKAFKA_LOG, **self._kafka.to_librdkafka()}

    def spark_kafka_options(self) -> dict[str, str]:
        """The same connection as Spark Kafka source options (Java client keys, ``kafka.``).

        ``KAFKA_OVERRIDES`` are librdkafka keys and apply to the driver-side consumer only.
        Secrets are revealed (inside ``kafka.sasl.jaas.config``): never log the result.
        """
        kafka = self._kafka
        options = {
            "kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kafka.security.protocol": kafka.security_protocol,
        }
        if kafka.ssl_ca_location:  # the Java client reads a PEM bundle as a truststore
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = kafka.ssl_ca_location
        if kafka.sasl_mechanism is not None:
            options["kafka.sasl.mechanism"] = kafka.sasl_mechanism
            options["kafka.sasl.jaas.config"] = jaas_config(kafka)
        if kafka.sasl_mechanism == "OAUTHBEARER":
            options["kafka.sasl.login.callback.handler.class"] = _OAUTH_HANDLER
            options["kafka.sasl.oauthbearer.token.endpoint.url"] = (
                kafka.oauth_token_endpoint_url or ""
            )
        return options


def jaas_config(kafka: KafkaSettings) -> str:
    """The Java client's ``sasl.jaas.config`` for ``kafka``'s SASL mechanism.

    ``org.apache.kafka.common.security.plain.PlainLoginModule required username="..."
    password="...";`` (SCRAM and OAuth alike), every value quoted with :func:`jaas_quote`.
    """
    mechanism = kafka.sasl_mechanism or "PLAIN"
    if mechanism == "OAUTHBEARER":
        secret = kafka.oauth_client_secret
        options = {
            "clientId": kafka.oauth_client_id or "",
            "clientSecret": secret.get_secret_value() if secret is not None else "",
        }
        if kafka.oauth_scope:
            options["scope"] = kafka.oauth_scope
    else:
        password = kafka.sasl_password
        options = {
            "username": kafka.sasl_username or "",
            "password": password.get_secret_value() if password is not None else "",
        }
    pairs = " ".join(f"{key}={jaas_quote(value)}" for key, value in options.items())
    return f"{_LOGIN_MODULES[mechanism]} required {pairs};"


def jaas_quote(value: str) -> str:
    r"""``value`` as a double-quoted JAAS string that Kafka's parser reads back unchanged.

    Kafka parses ``sasl.jaas.config`` with ``java.io.StreamTokenizer``: inside quotes a
    backslash starts an escape and a line break ends the string, so ``\``, ``"`` and line
    breaks are escaped.
    """
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'
