"""Reader profiles: which Delta reader features the writer may turn on, for whom (pure)."""

from __future__ import annotations

import pytest

from lakehouse_writer.errors import SchemaEvolutionError
from lakehouse_writer.runtime.lines import LINES
from lakehouse_writer.tables.features import (
    COLUMN_MAPPING,
    DELETION_VECTORS,
    READER_FEATURES,
    TYPE_WIDENING,
    FeatureConflict,
    parse_readers,
    reader_policy,
)


@pytest.mark.parametrize(
    ("readers", "allowed"),
    [
        pytest.param("", set(READER_FEATURES), id="none-named-everything"),
        pytest.param("fabric", {DELETION_VECTORS, COLUMN_MAPPING}, id="fabric"),
        pytest.param(
            "databricks",
            {DELETION_VECTORS, COLUMN_MAPPING, TYPE_WIDENING, "timestampNtz"},
            id="databricks",
        ),
        pytest.param("open", {"timestampNtz"}, id="open"),
        pytest.param("fabric,databricks", {DELETION_VECTORS, COLUMN_MAPPING}, id="both-read"),
        pytest.param(" Open , FABRIC ", set(), id="every-reader-must-read-it"),
    ],
)
def test_a_profile_allows_what_all_its_readers_read(readers, allowed):
    assert set(reader_policy(parse_readers(readers)).allowed) == allowed


@pytest.mark.parametrize(
    ("readers", "setting", "on"),
    [
        ("", None, True),
        ("fabric", None, True),
        ("open", None, False),
        ("open", False, False),
        ("fabric", False, False),
        ("databricks", True, True),
    ],
)
def test_deletion_vectors_follow_the_readers_unless_set(readers, setting, on):
    policy = reader_policy(parse_readers(readers), setting)

    assert policy.deletion_vectors is on
    expected = "true" if on else "false"
    assert policy.creation_properties() == {"delta.enableDeletionVectors": expected}


def test_deletion_vectors_asked_for_readers_that_refuse_them_stop_the_start():
    with pytest.raises(FeatureConflict) as refused:
        reader_policy(parse_readers("fabric,open"), deletion_vectors=True)

    message = str(refused.value)
    assert "LAKEHOUSE_DELETION_VECTORS=true" in message and "readers open " in message


def test_an_unknown_reader_is_named():
    with pytest.raises(FeatureConflict, match=r"unknown readers \['synapse'\]"):
        parse_readers("fabric,synapse")


def test_a_feature_the_readers_refuse_stops_the_table_naming_what_needs_it():
    policy = reader_policy(parse_readers("open"))

    with pytest.raises(SchemaEvolutionError) as stopped:
        policy.require(COLUMN_MAPPING, "SHOP.ORDERS", column="ORDER NO")

    assert stopped.value.table == "SHOP.ORDERS"
    assert "columnMapping" in str(stopped.value) and "ORDER NO" in str(stopped.value)
    policy.require("timestampNtz", "SHOP.ORDERS")  # read by all of them: no error


@pytest.mark.parametrize("readers", ["fabric", "databricks", "open"])
def test_no_profile_reads_the_spark_35_lines_type_widening(readers):
    """Delta 3.2 widens with typeWidening-preview, which neither Fabric's endpoint nor
    Databricks nor the open readers list: on that line a widening stops the table."""
    policy = reader_policy(parse_readers(readers))

    assert not policy.allows(LINES["3.5"].type_widening)
    assert policy.allows(LINES["4.1"].type_widening) is (readers == "databricks")
