"""Settings of the external systems producer_lib talks to, read from the environment.

Quickstart::

    from producer_lib.settings import KafkaSettings, SchemaRegistrySettings, get_environment

    kafka = KafkaSettings()              # KAFKA_BOOTSTRAP_SERVERS, KAFKA_SECURITY_PROTOCOL, ...
    conf = kafka.to_librdkafka()         # {"bootstrap.servers": ..., "sasl.mechanism": ...}
    registry = SchemaRegistrySettings()  # SCHEMA_REGISTRY_URL (optional), basic auth
    oracle = OracleConnectionSettings("Labware-Source")  # user, password, dsn from a secret
    environment = get_environment()      # FLOW_ENVIRONMENT, e.g. "dev"

One module per system: :mod:`~producer_lib.settings.kafka` (``KAFKA_*``),
:mod:`~producer_lib.settings.registry` (``SCHEMA_REGISTRY_*``, the catalog topic),
:mod:`~producer_lib.settings.flow` (``FLOW_*``: where a flow runs, its triggers),
:mod:`~producer_lib.settings.azure_storage` (``AZURE_STORAGE_*``: Azure paths in a flow's SQL),
:mod:`~producer_lib.settings.oracle` (an Oracle login from a secret),
:mod:`~producer_lib.settings.logs` (``LOG_FORMAT``, ``LOG_LEVEL``); their common base is
:mod:`~producer_lib.settings.base`. Every variable is listed in ``docs/ENVIRONMENT.md``,
generated from these classes (``python scripts/env_reference.py``).

Each class is a frozen pydantic-settings model (a ``.env`` file in the working directory
works too). Secrets are :class:`~pydantic.SecretStr`: ``repr``/``str`` show ``**********``
and only :meth:`KafkaSettings.to_librdkafka` / :meth:`SchemaRegistrySettings.to_client_config`
reveal them, to hand them to the client libraries.

A missing or contradictory setting raises :class:`~producer_lib.errors.ConfigError` naming
the environment variable (``KAFKA_BOOTSTRAP_SERVERS is not set``), never pydantic's
``ValidationError``: that one echoes every input value, passwords included.
"""

from producer_lib.settings.azure_storage import AzureStorageSettings
from producer_lib.settings.base import EnvSettings, env_name
from producer_lib.settings.flow import FlowSettings, TriggerSettings, get_environment
from producer_lib.settings.kafka import KafkaSecretSettings, KafkaSettings
from producer_lib.settings.logs import LogSettings
from producer_lib.settings.oracle import OracleConnectionSettings
from producer_lib.settings.registry import SchemaRegistrySettings

__all__ = [
    "AzureStorageSettings",
    "EnvSettings",
    "FlowSettings",
    "KafkaSecretSettings",
    "KafkaSettings",
    "LogSettings",
    "OracleConnectionSettings",
    "SchemaRegistrySettings",
    "TriggerSettings",
    "env_name",
    "get_environment",
]
