"""producer_lib: the library flow repos import to publish change rows to Kafka.

Quickstart (a flow's initial load; see ``docs/DESIGN.md``)::

    import duckdb
    from producer_lib import (DuckDBReader, KafkaProducer, KafkaSettings, KeySchema, RowType,
                              create_key_row, create_truncate_row)

    async with DuckDBReader(log) as reader:
        await reader.load("ORDERS", "select * from 'orders.parquet'", "SHOP", "SHOPDB")
    with KafkaProducer("SHOPDB", "shop_flow", "bronze", "dev", KafkaSettings(), log) as producer:
        key_schema = KeySchema(reader.table_schema)
        target = producer.add_target("ORDERS", "ORDERS", key_schema, reader.table_schema)
        truncate = create_truncate_row(reader.table_schema, None)
        producer.produce_row(target, create_key_row(truncate, key_schema), truncate,
                             RowType.TRUNCATE, partition=0)
        producer.produce_from_duckdb("ORDERS", target, 40_000, RowType.REPLACE)
        producer.commit()

The data path: :mod:`~producer_lib.sources` (read) → :mod:`~producer_lib.staging` (DuckDB) →
:mod:`~producer_lib.schema` (Avro types, schemas, encoding) → :mod:`~producer_lib.kafka`
(producer, transactions, schema catalog) → :mod:`~producer_lib.runner` (FunctionRunner, delta
pointer, execution log, lineage, HTTP triggers).

The names of the flow authors' documentation work as written there: ``Producer`` is
:class:`KafkaProducer` (the type hint), ``get_environment()`` is KafkaProducer's environment,
``OracleConnectionSettings("Labware-Source")`` reads an Oracle login from a secret and
``azure_utils.read_secret(name)`` any secret (Azure Key Vault when ``AZURE_KEY_VAULT_URL`` is
set, else the environment variable ``SECRET_<NAME>``).
"""

from typing import TYPE_CHECKING, Any

from producer_lib import azure_utils, sources
from producer_lib._version import installed_version
from producer_lib.errors import (
    ConfigError,
    EncodeError,
    ProduceError,
    ProducerLibError,
    SchemaError,
    SourceError,
)
from producer_lib.kafka import KafkaProducer, Target
from producer_lib.runner import FunctionRunner, RunFailed, RunResult
from producer_lib.schema import (
    AvroArray,
    AvroBoolean,
    AvroByte,
    AvroBytes,
    AvroCLOB,
    AvroDate,
    AvroDecimal,
    AvroDouble,
    AvroFloat,
    AvroInt,
    AvroLong,
    AvroMap,
    AvroNCLOB,
    AvroNVarchar,
    AvroRecord,
    AvroShort,
    AvroSTGeometry,
    AvroSTPoint,
    AvroString,
    AvroTimeMicros,
    AvroTimeMillis,
    AvroTimestamp,
    AvroTimestampMicros,
    AvroURI,
    AvroUUID,
    AvroVarchar,
    KeySchema,
    RowType,
    ValueSchema,
    create_key_row,
    create_truncate_row,
)
from producer_lib.settings import (
    KafkaSecretSettings,
    KafkaSettings,
    OracleConnectionSettings,
    SchemaRegistrySettings,
    get_environment,
)
from producer_lib.sources import DuckDBReader, SourceAdapter

if TYPE_CHECKING:  # readers whose client library is an extra load on first use
    from producer_lib.sources import OracleReader, PostgresReader, RestReader

__version__ = installed_version()  # from git tags at build time (CHANGELOG.md)

Producer = KafkaProducer  # the documentation's type hint: `producer: Producer`

__all__ = [
    "AvroArray",
    "AvroBoolean",
    "AvroByte",
    "AvroBytes",
    "AvroCLOB",
    "AvroDate",
    "AvroDecimal",
    "AvroDouble",
    "AvroFloat",
    "AvroInt",
    "AvroLong",
    "AvroMap",
    "AvroNCLOB",
    "AvroNVarchar",
    "AvroRecord",
    "AvroSTGeometry",
    "AvroSTPoint",
    "AvroShort",
    "AvroString",
    "AvroTimeMicros",
    "AvroTimeMillis",
    "AvroTimestamp",
    "AvroTimestampMicros",
    "AvroURI",
    "AvroUUID",
    "AvroVarchar",
    "ConfigError",
    "DuckDBReader",
    "EncodeError",
    "FunctionRunner",
    "KafkaProducer",
    "KafkaSecretSettings",
    "KafkaSettings",
    "KeySchema",
    "OracleConnectionSettings",
    "OracleReader",
    "PostgresReader",
    "ProduceError",
    "Producer",
    "ProducerLibError",
    "RestReader",
    "RowType",
    "RunFailed",
    "RunResult",
    "SchemaError",
    "SchemaRegistrySettings",
    "SourceAdapter",
    "SourceError",
    "Target",
    "ValueSchema",
    "azure_utils",
    "create_key_row",
    "create_truncate_row",
    "get_environment",
]


def __getattr__(name: str) -> Any:
    """Readers whose client library is an extra import it on first use (``[oracle]``, ...)."""
    if name in ("OracleReader", "PostgresReader", "RestReader"):
        return getattr(sources, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
