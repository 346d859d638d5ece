"""Settings of the lakehouse writer, read from the environment (or a ``.env`` file).

Quickstart::

    settings = LakehouseSettings()                     # LAKEHOUSE_PATH=... etc.
    settings = LakehouseSettings(lakehouse_path="/data/lake", checkpoint_path="/data/ckpt")
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

# Kafka's own internal topics start with "__"; `_schemas` holds the catalog, not rows.
DEFAULT_TOPICS_REGEX = r"(?!__|_schemas$).+"


class LakehouseSettings(BaseSettings):
    """Where the writer reads from and writes to, and how big its micro-batches are.

    Attributes:
        lakehouse_path: Root of the Delta tables (``LAKEHOUSE_PATH``).
        checkpoint_path: Streaming checkpoint (``LAKEHOUSE_CHECKPOINT_PATH``).
        kafka_bootstrap_servers: ``KAFKA_BOOTSTRAP_SERVERS``.
        kafka_security_protocol: ``KAFKA_SECURITY_PROTOCOL`` (PLAINTEXT, SSL, SASL_SSL ...).
        kafka_sasl_mechanism: ``KAFKA_SASL_MECHANISM``.
        kafka_sasl_username: ``KAFKA_SASL_USERNAME``.
        kafka_sasl_password: ``KAFKA_SASL_PASSWORD`` (never logged).
        schema_registry_url: ``SCHEMA_REGISTRY_URL``; Confluent-framed rows need it.
        topics_regex: Java regex of the topics to subscribe to (``LAKEHOUSE_TOPICS_REGEX``).
        trigger_interval_s: Seconds between micro-batches (``LAKEHOUSE_TRIGGER_INTERVAL_S``).
        max_offsets_per_trigger: Bound of one batch; None reads all that is there.
        reload_one_pass_min_rows: A batch with at least this many offsets of one topic that
            looks like a reload into an empty table is written in the pass that reads it
            (:mod:`lakehouse_writer.reload`; ``LAKEHOUSE_RELOAD_ONE_PASS_MIN_ROWS``); 0: never.
        schemas_topic: The schema catalog topic (``_schemas``).
        commits_topic: Commit records (``_commits``).
        execution_log_topic: Run records (``_execution_log``).
        lineage_topic: Lineage documents (``_lineage``).
    """

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", frozen=True)

    lakehouse_path: str = Field("lakehouse", validation_alias="LAKEHOUSE_PATH")
    checkpoint_path: str = Field(
        "lakehouse_checkpoint", validation_alias="LAKEHOUSE_CHECKPOINT_PATH"
    )
    kafka_bootstrap_servers: str = Field(
        "127.0.0.1:19092", validation_alias="KAFKA_BOOTSTRAP_SERVERS"
    )
    kafka_security_protocol: str | None = Field(None, validation_alias="KAFKA_SECURITY_PROTOCOL")
    kafka_sasl_mechanism: str | None = Field(None, validation_alias="KAFKA_SASL_MECHANISM")
    kafka_sasl_username: str | None = Field(None, validation_alias="KAFKA_SASL_USERNAME")
    kafka_sasl_password: SecretStr | None = Field(None, validation_alias="KAFKA_SASL_PASSWORD")
    schema_registry_url: str | None = Field(None, validation_alias="SCHEMA_REGISTRY_URL")
    topics_regex: str = Field(DEFAULT_TOPICS_REGEX, validation_alias="LAKEHOUSE_TOPICS_REGEX")
    trigger_interval_s: float = Field(10.0, validation_alias="LAKEHOUSE_TRIGGER_INTERVAL_S")
    max_offsets_per_trigger: int | None = Field(
        None, validation_alias="LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER"
    )
    reload_one_pass_min_rows: int = Field(
        50_000, ge=0, validation_alias="LAKEHOUSE_RELOAD_ONE_PASS_MIN_ROWS"
    )
    schemas_topic: str = Field("_schemas", validation_alias="LAKEHOUSE_SCHEMAS_TOPIC")
    commits_topic: str = Field("_commits", validation_alias="LAKEHOUSE_COMMITS_TOPIC")
    execution_log_topic: str = Field(
        "_execution_log", validation_alias="LAKEHOUSE_EXECUTION_LOG_TOPIC"
    )
    lineage_topic: str = Field("_lineage", validation_alias="LAKEHOUSE_LINEAGE_TOPIC")

    def kafka_client_conf(self) -> dict[str, str]:
        """Librdkafka settings (dotted keys) for the driver-side consumer."""
        conf = {"bootstrap.servers": self.kafka_bootstrap_servers}
        if self.kafka_security_protocol:
            conf["security.protocol"] = self.kafka_security_protocol
        if self.kafka_sasl_mechanism:
            conf["sasl.mechanism"] = self.kafka_sasl_mechanism
        if self.kafka_sasl_username:
            conf["sasl.username"] = self.kafka_sasl_username
        if self.kafka_sasl_password:
            conf["sasl.password"] = self.kafka_sasl_password.get_secret_value()
        return conf

    def spark_kafka_options(self) -> dict[str, str]:
        """The same settings as Spark Kafka source options (``kafka.`` prefix)."""
        return {f"kafka.{k}": v for k, v in self.kafka_client_conf().items() if "sasl" not in k} | (
            self._jaas() if self.kafka_sasl_username else {}
        )

    def _jaas(self) -> dict[str, str]:
        password = self.kafka_sasl_password.get_secret_value() if self.kafka_sasl_password else ""
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if (self.kafka_sasl_mechanism or "PLAIN") == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        jaas = f'{module} required username="{self.kafka_sasl_username}" password="{password}";'
        return {
            "kafka.sasl.mechanism": self.kafka_sasl_mechanism or "PLAIN",
            "kafka.sasl.jaas.config": jaas,
        }
