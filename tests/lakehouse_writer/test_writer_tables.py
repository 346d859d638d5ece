"""Delta tables from value schemas: creation with metadata, evolution, incompatible changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakehouse_writer.engines.spark.engine import upserts as conform
from lakehouse_writer.errors import SchemaEvolutionError
from lakehouse_writer.tables.features import reader_policy
from lakehouse_writer.tables.manager import TableManager, TableRef, path_segment, spark_type
from producer_lib.schema import AvroInt, AvroLong, AvroNVarchar, AvroShort, ValueSchema

pytestmark = pytest.mark.spark


_INT = AvroInt()


def _schema(amount_type=_INT, extra: bool = False) -> ValueSchema:
    schema = ValueSchema("/BIC/AZSALES", "SAP BW", doc="sales")
    schema.add_field("ID", AvroLong(), doc="the id", nullable=False)
    schema.add_field("REVENUE$", amount_type, doc="revenue")
    schema.add_field("Größe", AvroNVarchar(10))
    if extra:
        schema.add_field("NEW COL", AvroNVarchar(5), doc="added later")
    schema.add_primary_key("ID")
    schema.set_data_product_owner_email("owner@example.com")
    schema.set_repo_url("https://git.example.com/flows")
    return schema


def test_path_segments_keep_names_but_not_slashes():
    assert path_segment("/BIC/AZSALES") == "~2FBIC~2FAZSALES"
    assert TableRef("SAP BW", "X:Y").path("/lake/") == "/lake/SAP BW/X~3AY"


@pytest.mark.slow
def test_table_is_created_with_original_names_comments_and_properties(spark, tmp_path):
    info = TableManager(spark, str(tmp_path)).ensure(_schema())
    assert info.path.endswith("/SAP BW/~2FBIC~2FAZSALES") and info.keys == ("ID",)
    struct = spark.read.format("delta").load(info.path).schema
    fields = {f.name: f for f in struct.fields}
    assert list(fields)[:3] == ["ID", "REVENUE$", "Größe"]
    assert "__change_time" in fields and "__truncate" in fields
    assert not fields["ID"].nullable and fields["REVENUE$"].nullable
    assert fields["ID"].metadata.get("comment") == "the id"
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{info.path}`").collect()[0]
    props = detail["properties"]
    assert props["flow.owner_email"] == "owner@example.com"
    assert props["flow.repo_url"] == "https://git.example.com/flows"
    assert props["delta.enableChangeDataFeed"] == "true"
    assert "delta.columnMapping.mode" not in props  # $ and umlauts need no column mapping
    assert detail["description"] == "sales"
    # statistics (data skipping) for the payload and the change time, not the other technical
    assert props["delta.dataSkippingStatsColumns"] == "`ID`,`REVENUE$`,`Größe`,`__change_time`"


@pytest.mark.slow
def test_a_name_parquet_cannot_hold_turns_on_column_mapping(spark, tmp_path):
    info = TableManager(spark, str(tmp_path)).ensure(_schema(extra=True))  # "NEW COL"
    props = spark.sql(f"DESCRIBE DETAIL delta.`{info.path}`").collect()[0]["properties"]
    assert props["delta.columnMapping.mode"] == "name"
    assert "NEW COL" in info.columns


@pytest.mark.slow
def test_new_columns_are_added_and_types_widened(spark, tmp_path):
    tables = TableManager(spark, str(tmp_path))
    tables.ensure(_schema(AvroShort()))
    info = tables.ensure(_schema(AvroLong(), extra=True))
    assert info.columns["NEW COL"].simpleString() == "string"
    props = spark.sql(f"DESCRIBE DETAIL delta.`{info.path}`").collect()[0]["properties"]
    assert props["delta.columnMapping.mode"] == "name"  # turned on for the space in the name
    given = spark.sql(
        "SELECT 1L AS ID, 'x' AS `NEW COL`, 'I' AS __change_type, "
        "current_timestamp() AS __change_time, "
        "'test' AS __source_system"
    )
    conform(given, info).write.format("delta").mode("append").save(info.path)
    row = spark.read.format("delta").load(info.path).collect()[0]
    assert (row["ID"], row["NEW COL"]) == (1, "x")
    props = spark.sql(f"DESCRIBE DETAIL delta.`{info.path}`").collect()[0]["properties"]
    assert (
        props["delta.dataSkippingStatsColumns"]
        == "`ID`,`REVENUE$`,`Größe`,`NEW COL`,`__change_time`"
    )
    stats = json.loads(_added_files(info.path)[-1]["stats"])
    minimum = stats["minValues"]  # REVENUE$ and Größe are null; NEW COL by its physical name
    assert len(minimum) == 3 and minimum["ID"] == 1 and "__change_time" in minimum
    assert "__source_system" not in stats["nullCount"]
    assert info.columns["REVENUE$"].simpleString() == "bigint"
    narrower = tables.ensure(_schema(AvroInt(), extra=True))  # old writers keep working
    assert narrower.columns["REVENUE$"].simpleString() == "bigint"


@pytest.mark.slow
def test_table_metadata_by_delta_rs_and_by_the_jvm_agree(spark, tmp_path):
    """The writer reads a local table's metadata by delta-rs; it must be what Delta's is."""
    from deltalake import write_deltalake

    from lakehouse_writer.tables.manager import delta_rs_table_metadata, jvm_table_metadata

    tables = TableManager(spark, str(tmp_path))
    mapped = tables.ensure(_schema(extra=True))  # column mapping for "NEW COL"
    given = spark.sql(
        "SELECT 1L AS ID, 'I' AS __change_type, current_timestamp() AS __change_time, "
        "'test' AS __source_system"
    )
    rows = conform(given, mapped).toArrow()
    write_deltalake(mapped.path, rows, mode="append")  # no checksum file for the JVM
    other = TableManager(spark, str(tmp_path / "other"))
    other.ensure(_schema(AvroShort()))
    widened = other.ensure(_schema(AvroLong()))  # typeWidening
    for info in (mapped, widened):
        by_rust = delta_rs_table_metadata(info.path)
        assert by_rust is not None
        assert by_rust == jvm_table_metadata(spark, info.path)
        properties, struct = by_rust
        assert properties["flow.primary_keys"] == '["ID"]'
        read = spark.read.format("delta").load(info.path).schema
        assert [(f.name, f.dataType) for f in struct.fields] == [
            (f.name, f.dataType) for f in read.fields
        ]
    assert delta_rs_table_metadata(mapped.path)[0]["delta.columnMapping.mode"] == "name"
    again = TableManager(spark, str(tmp_path)).ensure(_schema(extra=True))
    assert (again.keys, again.columns) == (mapped.keys, mapped.columns)
    assert widened.columns["REVENUE$"].simpleString() == "bigint"


@pytest.mark.slow
def test_incompatible_change_raises_for_that_table(spark, tmp_path):
    tables = TableManager(spark, str(tmp_path))
    tables.ensure(_schema(AvroInt()))
    with pytest.raises(SchemaEvolutionError, match="incompatible column type") as err:
        tables.ensure(_schema(AvroNVarchar(10)))
    assert err.value.table == "SAP BW./BIC/AZSALES" and err.value.column == "REVENUE$"
    rekeyed = _schema()
    rekeyed.set_primary_keys("ID", "Größe")
    with pytest.raises(SchemaEvolutionError, match="primary key changed"):
        tables.ensure(rekeyed)


@pytest.mark.slow
def test_a_table_made_ahead_is_created_once_and_an_existing_one_is_left_as_it_is(spark, tmp_path):
    from lakehouse_writer.tables.manager import no_data_files

    tables = TableManager(spark, str(tmp_path))
    assert tables.create_missing(_schema(AvroShort()))
    assert not tables.create_missing(_schema(AvroShort()))
    info = tables.ensure(_schema(AvroShort()))  # the batch's rows find it made
    assert info.created and no_data_files(spark, info.path)
    assert spark.sql(f"DESCRIBE HISTORY delta.`{info.path}`").count() == 1  # no second commit
    later = TableManager(spark, str(tmp_path))  # e.g. after a restart
    assert not later.create_missing(_schema(AvroLong(), extra=True))  # no evolution either
    assert "NEW COL" not in later.ensure(_schema(AvroShort())).columns
    assert not later.ensure(_schema(AvroShort())).created


def _version_zero(path: str) -> dict[str, dict]:
    """The table's first commit by action, without what differs between any two commits."""
    text = (Path(path) / "_delta_log" / f"{0:020d}.json").read_text()
    actions = {k: v for line in text.splitlines() for k, v in json.loads(line).items()}
    for action, varying in (
        ("metaData", ("id", "createdTime")),
        ("commitInfo", ("timestamp", "txnId")),
    ):
        for key in varying:
            actions[action].pop(key, None)
    schema = json.loads(actions["metaData"]["schemaString"])
    for field in schema["fields"]:  # column mapping's physical names are random: named back
        physical = field["metadata"].pop("delta.columnMapping.physicalName", None)
        if physical and "domainMetadata" in actions:
            domain = actions["domainMetadata"]
            domain["configuration"] = domain["configuration"].replace(physical, field["name"])
    actions["metaData"]["schemaString"] = schema
    return actions


def _created_by_delta_s_builder(
    spark, path: str, schema: ValueSchema, deletion_vectors: bool
) -> None:
    """The table as ``DeltaTable.createIfNotExists`` makes it: what the SQL must give."""
    from delta.tables import DeltaTable

    from lakehouse_writer.tables.manager import schema_fields, table_properties

    builder = DeltaTable.createIfNotExists(spark).location(path).comment(schema.doc)
    for item in schema_fields(schema):
        builder = builder.addColumn(
            item.name, item.type.to_spark(), item.nullable, comment=item.doc
        )
    for key, value in table_properties(schema, reader_policy((), deletion_vectors)).items():
        builder = builder.property(key, value)
    if schema.cluster_columns:
        builder = builder.clusterBy(*schema.cluster_columns)
    builder.execute()


@pytest.mark.slow
@pytest.mark.parametrize("deletion_vectors", [True, False], ids=["dv", "no-dv"])
def test_a_table_is_created_as_delta_s_builder_creates_it_and_keeps_dollar_braces(
    spark, tmp_path, deletion_vectors
):
    text = "it's ${spark.sql.shuffle.partitions} and ${no.such.setting}, \\ a\nb é"
    schema = _schema(extra=True)  # "NEW COL": column mapping on
    schema.set_table_comment(text)
    schema.set_column_comment("REVENUE$", text)
    schema.set_repo_url(f"https://git.example.com/{text}")
    if deletion_vectors:
        schema.set_cluster_columns("ID")  # the builder refuses "REVENUE$": see below
    policy = reader_policy((), deletion_vectors)
    info = TableManager(spark, str(tmp_path / "sql"), policy).ensure(schema)
    builder_path = str(tmp_path / "builder")
    _created_by_delta_s_builder(spark, builder_path, schema, deletion_vectors)
    ours, delta_s = _version_zero(info.path), _version_zero(builder_path)
    assert ours == delta_s
    metadata = ours["metaData"]
    assert metadata["description"] == text  # Spark's ${...} substitution left it alone
    assert metadata["configuration"]["flow.repo_url"] == f"https://git.example.com/{text}"
    fields = {f["name"]: f for f in metadata["schemaString"]["fields"]}
    assert fields["REVENUE$"]["metadata"]["comment"] == text
    assert ("clustering" in ours["protocol"].get("writerFeatures", [])) == deletion_vectors
    if deletion_vectors:  # names the builder cannot parse (its clusterBy fails on "$")
        schema.set_cluster_columns("REVENUE$", "NEW COL")
        other = TableManager(spark, str(tmp_path / "other")).ensure(schema)
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{other.path}`").collect()[0]
        assert detail["clusteringColumns"] == ["`REVENUE$`", "`NEW COL`"]  # quoted: not plain


def _added_files(path: str) -> list[dict]:
    """The ``add`` actions of the table's log, oldest first."""
    log = sorted((Path(path) / "_delta_log").glob("*.json"))
    lines = [json.loads(line) for f in log for line in f.read_text().splitlines()]
    return [a["add"] for a in lines if "add" in a]


def test_stats_columns_are_the_first_32_payload_columns_delta_can_skip_on_and_the_time():
    from lakehouse_writer.tables.manager import stats_columns

    columns = [("flag", "boolean"), ("blob", "binary"), ("tags", "map<string,string>")]
    columns += [(f"c{i}", "decimal(10,2)" if i % 2 else "string") for i in range(40)]
    columns += [("__change_type", "string"), ("__change_time", "timestamp")]
    assert stats_columns(columns) == ",".join([*(f"`c{i}`" for i in range(32)), "`__change_time`"])
    assert (
        stats_columns([("a`b", "int"), ("__source_system", "string")]) == "`a``b`,`__change_time`"
    )


@pytest.mark.slow
@pytest.mark.parametrize("ddl", ["bigint", "decimal(15,2)", "array<struct<`a b`:int,c:string>>"])
def test_a_column_type_is_parsed_as_spark_parses_it_and_once(spark, ddl):
    from pyspark.sql.types import _parse_datatype_string

    assert spark_type(ddl) == _parse_datatype_string(ddl)
    assert spark_type(ddl) is spark_type(ddl)  # from the cache: no JVM call the second time
