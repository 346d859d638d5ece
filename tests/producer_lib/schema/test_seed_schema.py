# ruff: noqa: E501  (the seed line below is copied verbatim)
"""The seed document's hand-made schema runs as written: ``pks`` set in a constructor.

``StarTekAvroSchema`` below is copied verbatim from ``shared/seeds/003_b855635a31d7109e.txt``
with only its ``"..."`` placeholders filled in (the e-mail and URLs are checked).
"""

from __future__ import annotations

import pytest

from producer_lib import AvroNVarchar, ValueSchema
from producer_lib.errors import SchemaError
from producer_lib.schema import AvroLong, ForeignKey, KeySchema


# fmt: off
# Verbatim from the seed document: its formatting is part of what must run unchanged.
class StarTekAvroSchema(ValueSchema):

    def __init__(self, name: str, namespace: str):
        super().__init__(name, namespace)
        self.add_field("Name", AvroNVarchar(1024), "The node name of the Attribute", False)
        self.add_field("AttributeType", AvroNVarchar(1024), "Type according to StarTek", True)
        self.add_field("AttributeValue", AvroNVarchar(1024), "The measure as string or an error text", True)
        self.pks = {"Name", "AttributeType"}

        self.set_data_product_owner_email("data.owner@example.com")
        self.set_repo_url("https://github.example.com/flows/startek")
        self.set_source_system_uri("https://startek.example.com/api")
        self.set_tickets_url("https://tickets.example.com/projects/STARTEK")
# fmt: on


def test_the_seed_schema_class_runs_and_keys_in_column_order() -> None:
    schema = StarTekAvroSchema("BQ_PIM_startek_DIRECT", "StarTek")
    assert schema.pks == ("Name", "AttributeType")
    key = KeySchema(schema)
    assert key.field_names == ("Name", "AttributeType")
    assert [f["name"] for f in key.to_avro_json()["fields"]] == ["Name", "AttributeType"]
    assert schema.to_avro_json()["primaryKeys"] == ["Name", "AttributeType"]


def schema_abc() -> ValueSchema:
    schema = ValueSchema("T", "N")
    for name in ("A", "B", "C"):
        schema.add_field(name, AvroLong())
    return schema


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"C", "A"}, ("A", "C")),
        (frozenset({"B", "C"}), ("B", "C")),
        (["C", "A"], ("C", "A")),
        (("B", "A"), ("B", "A")),
        ("B", ("B",)),
        ([], ()),
    ],
    ids=["set", "frozenset", "list", "tuple", "one-name", "empty"],
)
def test_pks_takes_sets_in_schema_order_and_sequences_in_their_order(
    given: object, expected: tuple[str, ...]
) -> None:
    schema = schema_abc()
    schema.pks = ["A"]
    schema.pks = given  # type: ignore[assignment]
    assert schema.pks == expected  # replaced, not appended
    assert KeySchema(schema).is_append_only == (expected == ())


@pytest.mark.parametrize("given", [{"A", "Nope"}, ["A", "Nope"]], ids=["set", "list"])
def test_pks_with_an_unknown_column_names_it_and_keeps_the_old_key(given: object) -> None:
    schema = schema_abc()
    schema.pks = ("B",)
    with pytest.raises(SchemaError) as info:
        schema.pks = given  # type: ignore[assignment]
    assert info.value.context["column"] == "Nope" and info.value.context["table"] == "T"
    assert schema.pks == ("B",)


def test_pks_hints_at_a_column_spelled_in_another_case() -> None:
    with pytest.raises(SchemaError, match="did you mean 'A'"):
        schema_abc().pks = ["a"]


def test_pks_naming_a_column_twice_is_an_error() -> None:
    schema = schema_abc()
    with pytest.raises(SchemaError, match="already in the primary key"):
        schema.pks = ["A", "A"]
    assert schema.pks == ()


def test_adding_the_same_foreign_key_twice_keeps_one() -> None:
    schema = schema_abc()
    first = schema.add_foreign_key("A", "N", "OTHER", "ID")
    again = schema.add_foreign_key(["A"], "N", "OTHER", ["ID"])  # augment_schema() run twice
    assert again == first
    assert schema.foreign_keys == (ForeignKey(("A",), "N", "OTHER", ("ID",)),)
    assert len(schema.to_avro_json()["foreignKeys"]) == 1
    schema.add_foreign_key("A", "N", "THIRD", "ID")  # a different key on the same column stays
    assert len(schema.foreign_keys) == 2
