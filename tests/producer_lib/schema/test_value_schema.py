import json
from datetime import timedelta

import fastavro
import pyarrow as pa
import pytest

from producer_lib.errors import SchemaError
from producer_lib.schema.types import (
    AvroArray,
    AvroDecimal,
    AvroField,
    AvroInt,
    AvroLong,
    AvroMap,
    AvroNVarchar,
    AvroRecord,
    AvroString,
    AvroTimestampMicros,
)
from producer_lib.schema.value_schema import TECHNICAL_FIELDS, KeySchema, ValueSchema

TECHNICAL_JSON = [
    {"name": "__change_type", "type": "string"},
    {"name": "__change_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "__source_system", "type": "string"},
    {"name": "__source_transaction", "type": ["null", "string"], "default": None},
    {"name": "__source_rowid", "type": ["null", "string"], "default": None},
    {
        "name": "__truncate",
        "type": ["null", {"type": "map", "values": ["null", "string"]}],
        "default": None,
    },
    {"name": "__audit", "type": ["null", {"type": "map", "values": "string"}], "default": None},
    {"name": "__extension", "type": ["null", {"type": "map", "values": "string"}], "default": None},
]


def _sample() -> ValueSchema:
    schema = ValueSchema("SAMPLE_PLAN", "LABWARE", doc="Sample plans")
    schema.add_field("PLANT", AvroNVarchar(4), nullable=False)
    schema.add_field("/BIC/ID", AvroLong(), doc="plan id", nullable=False)
    schema.add_field("REVENUE$", AvroDecimal(12, 2))
    schema.add_field("TAGS", AvroArray(AvroString()))
    schema.add_field("ADDR", AvroRecord("ADDR", [AvroField("Straße", AvroString())]))
    schema.add_primary_key("PLANT", "/BIC/ID")
    schema.add_foreign_key("PLANT", "MASTER", "PLANTS", "ID")
    schema.set_data_product_owner_email("owner@example.com")
    schema.set_repo_url("https://git.example.com/flows/labware")
    schema.set_tickets_url("https://tickets.example.com/LAB")
    schema.set_source_system_uri("jdbc:oracle:thin:@db:1521/LIMS")
    schema.set_retention_period(30)
    schema.set_deletion_policy("delete-after-retention")
    schema.set_data_classification(None, "INTERNAL")
    schema.set_data_classification("REVENUE$", "CONFIDENTIAL")
    return schema


def test_technical_fields_follow_the_payload_in_the_agreed_order_and_types():
    fields = _sample().to_avro_json()["fields"]
    assert [f["name"] for f in fields[:5]] == [
        "PLANT",
        "_x__2f_BIC_2f_ID",
        "_x_REVENUE_24_",
        "TAGS",
        "ADDR",
    ]
    assert fields[5:] == TECHNICAL_JSON


def test_schema_json_carries_names_keys_and_governance_as_properties():
    avro = _sample().to_avro_json()
    assert avro["name"] == "SAMPLE_PLAN" and avro["namespace"] == "LABWARE"
    assert avro["doc"] == "Sample plans"
    assert avro["primaryKeys"] == ["PLANT", "/BIC/ID"]
    assert avro["foreignKeys"] == [
        {"columns": ["PLANT"], "refNamespace": "MASTER", "refTable": "PLANTS", "refColumns": ["ID"]}
    ]
    assert avro["dataProductOwnerEmail"] == "owner@example.com"
    assert avro["repoUrl"] == "https://git.example.com/flows/labware"
    assert avro["ticketsUrl"] == "https://tickets.example.com/LAB"
    assert avro["sourceSystemUri"] == "jdbc:oracle:thin:@db:1521/LIMS"
    assert avro["retentionPeriod"] == "P30D"
    assert avro["deletionPolicy"] == "delete-after-retention"
    assert avro["dataClassification"] == "INTERNAL"
    bic = avro["fields"][1]
    assert bic == {
        "name": "_x__2f_BIC_2f_ID",
        "type": "long",
        "doc": "plan id",
        "sourceName": "/BIC/ID",
    }
    assert avro["fields"][2]["dataClassification"] == "CONFIDENTIAL"
    assert "sourceName" not in avro["fields"][0]


def test_schema_json_is_accepted_by_fastavro_and_encodes_a_row():
    schema = _sample()
    parsed = fastavro.parse_schema(schema.to_avro_json())
    row = {
        "PLANT": "1000",
        "_x__2f_BIC_2f_ID": 7,
        "_x_REVENUE_24_": None,
        "TAGS": ["a"],
        "ADDR": {"_x_Stra_df_e": "Main"},
        "__change_type": "I",
        "__change_time": 1,
        "__source_system": "LIMS",
    }
    assert fastavro.validate(row, parsed)


@pytest.mark.parametrize("as_text", [False, True], ids=["dict", "json-string"])
def test_from_avro_json_round_trips_exactly(as_text):
    schema = _sample()
    schema.properties["x-custom"] = {"kept": True}
    source = schema.to_json() if as_text else schema.to_avro_json()
    restored = ValueSchema.from_avro_json(source)
    assert restored.to_json() == schema.to_json()
    assert restored == schema
    assert restored.pks == ("PLANT", "/BIC/ID")
    assert restored.field("/BIC/ID").doc == "plan id"
    assert restored.column_classifications == {"REVENUE$": "CONFIDENTIAL"}


def test_odd_table_and_namespace_names_round_trip():
    schema = ValueSchema("/BIC/AZSALES", "SAP BW.prod")
    schema.add_field("A", AvroInt())
    avro = schema.to_avro_json()
    fastavro.parse_schema(avro)
    assert avro["sourceName"] == "/BIC/AZSALES" and avro["sourceNamespace"] == "SAP BW.prod"
    restored = ValueSchema.from_avro_json(avro)
    assert (restored.name, restored.namespace) == ("/BIC/AZSALES", "SAP BW.prod")


def test_from_avro_json_rejects_a_record_without_technical_fields():
    with pytest.raises(SchemaError, match="technical fields"):
        ValueSchema.from_avro_json(
            {
                "type": "record",
                "name": "T",
                "namespace": "N",
                "fields": [{"name": "a", "type": "int"}],
            }
        )


def test_get_pyarrow_uses_original_names_and_nullability():
    arrow = _sample().get_pyarrow()
    assert arrow.names[:3] == ["PLANT", "/BIC/ID", "REVENUE$"]
    assert arrow.field("PLANT").nullable is False
    assert arrow.field("REVENUE$").type == pa.decimal128(12, 2)
    assert arrow.field("ADDR").type == pa.struct([pa.field("Straße", pa.string())])
    assert arrow.names[5:] == [f.name for f in TECHNICAL_FIELDS]
    assert arrow.field("__change_time").type == pa.timestamp("us", tz="UTC")
    assert _sample().get_pyarrow(technical=False).names[-1] == "ADDR"


def test_fields_are_looked_up_by_original_name():
    schema = _sample()
    assert list(schema.fields) == ["PLANT", "/BIC/ID", "REVENUE$", "TAGS", "ADDR"]
    assert schema.fields["REVENUE$"].avro_name == "_x_REVENUE_24_"
    with pytest.raises(SchemaError, match="No such column") as info:
        schema.field("NOPE")
    assert info.value.column == "NOPE" and info.value.table == "SAMPLE_PLAN"


@pytest.mark.parametrize(
    "name",
    ["__change_type", "__mine", "", "plant", "PLANT"],
    ids=["technical", "double-underscore", "empty", "case-duplicate", "duplicate"],
)
def test_bad_or_duplicate_column_names_are_rejected_naming_the_column(name):
    schema = ValueSchema("T", "N")
    schema.add_field("PLANT", AvroString())
    with pytest.raises(SchemaError) as info:
        schema.add_field(name, AvroString())
    assert info.value.column == name


def test_a_type_class_is_accepted_for_an_instance():
    schema = ValueSchema("T", "N")
    assert schema.add_field("A", AvroInt).type == AvroInt()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("setter", "value"),
    [
        ("set_data_product_owner_email", "not-an-email"),
        ("set_data_product_owner_email", "a@b"),
        ("set_repo_url", "git.example.com/repo"),
        ("set_tickets_url", "ftp://tickets"),
        ("set_source_system_uri", "no scheme here"),
        ("set_retention_period", 0),
        ("set_retention_period", "30 days"),
        ("set_retention_period", timedelta(hours=5)),
        ("set_deletion_policy", " "),
    ],
    ids=[
        "email-shape",
        "email-domain",
        "repo-no-scheme",
        "tickets-ftp",
        "source-uri",
        "retention-zero",
        "retention-text",
        "retention-hours",
        "policy-empty",
    ],
)
def test_governance_setters_reject_malformed_values(setter, value):
    with pytest.raises(SchemaError) as info:
        getattr(ValueSchema("T", "N"), setter)(value)
    assert info.value.table == "T"


@pytest.mark.parametrize(
    ("value", "stored"),
    [(90, "P90D"), (timedelta(days=7), "P7D"), ("P1Y", "P1Y"), ("P1Y6M", "P1Y6M")],
    ids=["days", "timedelta", "iso-year", "iso-year-month"],
)
def test_retention_period_is_stored_as_an_iso_duration(value, stored):
    schema = ValueSchema("T", "N")
    schema.set_retention_period(value)
    assert schema.to_avro_json()["retentionPeriod"] == stored


def test_keys_must_name_existing_columns():
    schema = ValueSchema("T", "N")
    schema.add_field("A", AvroInt())
    with pytest.raises(SchemaError, match="No such column"):
        schema.add_primary_key("B")
    with pytest.raises(SchemaError, match="No such column"):
        schema.add_foreign_key(["B"], "N", "OTHER", ["ID"])
    with pytest.raises(SchemaError, match="as many columns"):
        schema.add_foreign_key(["A"], "N", "OTHER", ["ID", "X"])
    with pytest.raises(SchemaError, match="already"):
        schema.add_primary_key("A", "A")


def test_key_schema_holds_primary_key_fields_in_key_order_not_null():
    schema = _sample()
    key = KeySchema(schema)
    avro = key.to_avro_json()
    assert (avro["name"], avro["namespace"]) == ("SAMPLE_PLAN_key", "LABWARE")
    assert avro["fields"] == [
        {"name": "PLANT", "type": {"type": "string", "logicalType": "NVARCHAR", "length": 4}},
        {"name": "_x__2f_BIC_2f_ID", "type": "long", "doc": "plan id", "sourceName": "/BIC/ID"},
    ]
    assert key.field_names == ("PLANT", "/BIC/ID") and not key.is_append_only
    assert key.get_pyarrow().names == ["PLANT", "/BIC/ID"]
    fastavro.parse_schema(json.loads(key.to_json()))


def test_table_without_primary_key_is_append_only_keyed_by_transaction_time():
    schema = ValueSchema("LOG", "N")
    schema.add_field("MSG", AvroString())
    key = KeySchema(schema)
    assert key.is_append_only
    assert key.fields == (AvroField("__change_time", AvroTimestampMicros(), nullable=False),)
    assert key.to_avro_json()["fields"] == [
        {"name": "__change_time", "type": {"type": "long", "logicalType": "timestamp-micros"}}
    ]


def test_truncate_map_type_allows_null_values():
    truncate = [f for f in TECHNICAL_FIELDS if f.name == "__truncate"][0]
    assert truncate.type == AvroMap(AvroString(), values_nullable=True)
