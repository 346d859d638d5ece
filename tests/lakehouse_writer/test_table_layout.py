"""A flow declares clustering columns on its schema; the writer lays the table out by them."""

from __future__ import annotations

import polars
import pytest

from lakehouse_writer.settings import LakehouseSettings
from lakehouse_writer.stream import job
from lakehouse_writer.tables.manager import TableManager
from producer_lib.errors import SchemaError
from producer_lib.schema import AvroArray, AvroLong, ValueSchema
from tests.support.writer import (
    T0,
    produce_transaction,
    published_topic,
    sample_schema,
    writer_env,
)


def _clustering(spark, path: str) -> list[str]:
    from delta.tables import DeltaTable

    return list(DeltaTable.forPath(spark, path).detail().collect()[0]["clusteringColumns"])


def test_clustering_columns_travel_in_the_schema():
    schema = sample_schema()
    schema.set_cluster_columns("REGION", "ID")
    assert schema.to_avro_json()["clusterBy"] == ["REGION", "ID"]
    assert ValueSchema.from_avro_json(schema.to_json()).cluster_columns == ("REGION", "ID")


@pytest.mark.parametrize(
    ("columns", "match"),
    [
        (("NOPE",), "No such column"),
        (("ID", "ID"), "named twice"),
        (("ID", "NAME", "REGION", "AMOUNT", "TAGS"), "At most 4"),
        (("TAGS",), "array column cannot be a clustering column"),
    ],
)
def test_bad_clustering_columns_are_refused(columns, match):
    schema = sample_schema()
    schema.add_field("TAGS", AvroArray(AvroLong()))
    with pytest.raises(SchemaError, match=match):
        schema.set_cluster_columns(*columns)
    assert schema.cluster_columns == ()


@pytest.mark.slow
def test_a_table_is_created_clustered_and_reclustered_when_the_schema_changes(spark, tmp_path):
    schema = sample_schema()
    schema.set_cluster_columns("ID")
    info = TableManager(spark, str(tmp_path)).ensure(schema)
    assert _clustering(spark, info.path) == ["ID"]

    schema.set_cluster_columns("REGION", "ID")
    TableManager(spark, str(tmp_path)).ensure(schema)  # e.g. the next writer run
    assert _clustering(spark, info.path) == ["REGION", "ID"]

    schema.set_cluster_columns()
    TableManager(spark, str(tmp_path)).ensure(schema)
    assert _clustering(spark, info.path) == []


@pytest.mark.kafka
@pytest.mark.slow
def test_changes_apply_to_a_clustered_table(spark, kafka_bootstrap, new_topic, tmp_path):
    schema = sample_schema()
    schema.set_cluster_columns("ID")
    topic, schemas = published_topic(new_topic, kafka_bootstrap, schema)
    inserted = [
        {"ID": i, "NAME": f"n{i}", "__change_type": "I", "__change_time": T0} for i in range(20)
    ]
    produce_transaction(kafka_bootstrap, topic, schema, inserted)
    changed = [
        {"ID": 3, "NAME": "three", "__change_type": "U", "__change_time": T0 + 1},
        {"ID": 4, "__change_type": "D", "__change_time": T0 + 1},
        {"ID": 99, "NAME": "new", "__change_type": "I", "__change_time": T0 + 1},
    ]
    produce_transaction(kafka_bootstrap, topic, schema, changed)
    lake, ckpt = str(tmp_path / "lake"), str(tmp_path / "ckpt")
    env = writer_env(lake, ckpt, kafka_bootstrap, LAKEHOUSE_SCHEMAS_TOPIC=schemas)
    settings = LakehouseSettings(
        **env,
        LAKEHOUSE_TOPICS_REGEX=topic,
        LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER=20,  # the changes come in a batch of their own
    )

    job.run(spark, settings, once=True)

    path = str(tmp_path / "lake" / "SHOP" / "ORDERS")
    rows = {r.ID: r.NAME for r in spark.read.format("delta").load(path).collect()}
    expected = {i: f"n{i}" for i in range(20) if i != 4} | {3: "three", 99: "new"}
    assert rows == expected
    assert _clustering(spark, path) == ["ID"]
    by_polars = polars.scan_delta(path).select("ID", "NAME").collect().rows()
    assert dict(by_polars) == expected  # clustering is a writer feature: readers read on
