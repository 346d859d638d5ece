"""Pure parts of the writer's per-batch bookkeeping: row summaries and header tags."""

from __future__ import annotations

import pytest

from lakehouse_writer.read.framing import header_tag
from lakehouse_writer.read.summary import RowSummary
from lakehouse_writer.rules.truncate import Truncate


def summary(*groups):
    """A summary of groups given as (change type, n, valued, lo, hi[, oldest[, truncates]]),
    read like Spark rows: the change type by position, the rest by name."""
    names = ("n", "valued", "lo", "hi", "oldest", "truncates")
    return RowSummary.of_groups(
        {0: g[0], **dict(zip(names, (*g[1:], None, None)[:6], strict=True))} for g in groups
    )


def test_the_key_range_leaves_out_truncate_placeholders():
    got = summary(("T", 1, 1, -999, -999), ("I", 3, 3, 10, 30), ("D", 1, 1, 5, 5))
    assert got.counts == {"T": 1, "I": 3, "D": 1}
    assert got.key_range == (5, 30)


@pytest.mark.parametrize(
    "groups",
    [
        [("I", 3, 2, 10, 30)],  # a NULL key among the rows: it matches only NULL, no range
        [("I", 3, None, None, None)],  # no key column
        [("T", 1, 1, 0, 0)],  # only a TRUNCATE
    ],
    ids=["null-key", "no-key", "truncate-only"],
)
def test_no_key_range_where_it_could_skip_a_match(groups):
    assert summary(*groups).key_range is None


def test_merging_two_schemas_adds_counts_and_widens_the_range():
    a = summary(("I", 2, 2, 10, 20))
    b = summary(("U", 1, 1, 5, 7), ("T", 1, 1, 0, 0))
    merged = a.merge(b)
    assert merged.counts == {"I": 2, "U": 1, "T": 1}
    assert merged.key_range == (5, 20)
    assert a.merge(summary(("T", 1, 1, 0, 0))).key_range == (10, 20)  # a truncate adds no keys
    assert a.merge(summary(("I", 1, 0, None, None))).key_range is None


def test_header_tags_name_registry_ids_and_fingerprints():
    assert header_tag(b"\x00\x00\x00\x01\x02") == "c:258"
    assert header_tag(bytearray(b"\xc3\x01" + bytes.fromhex("0011223344556677"))) == (
        "f:0011223344556677"
    )


def test_groups_of_one_change_type_from_several_partitions_add_up():
    got = RowSummary.of_counts(
        [
            ("R", 3, 3, 10, 30, 7, []),
            ("T", 1, 1, 0, 0, 2, None),
            ("R", 2, 2, 1, 12, 5, []),
            ("D", 1, 1, 40, 40, 9, []),
        ]
    )
    assert got.counts == {"R": 5, "T": 1, "D": 1}
    assert got.key_range == (1, 40)
    assert got.oldest == 5  # the TRUNCATE's own time does not count


def test_a_null_key_in_any_partition_voids_the_range():
    got = RowSummary.of_counts([("R", 3, 3, 10, 30, 4, []), ("R", 2, 1, 1, 12, 3, [])])
    assert got.counts == {"R": 5}
    assert got.key_range is None
    assert got.oldest == 3


def test_the_oldest_row_of_two_schemas_is_the_older_one_and_truncates_do_not_count():
    a = summary(("I", 2, 2, 10, 20, 50))
    b = summary(("U", 1, 1, 5, 7, 40), ("T", 1, 1, 0, 0, 10))
    assert a.merge(b).oldest == 40
    assert summary(("T", 1, 1, 0, 0, 10)).oldest is None
    assert a.merge(summary(("T", 1, 1, 0, 0, 10))).oldest == 50


def test_truncates_of_all_groups_and_schemas_are_distinct_and_oldest_first():
    scoped = {"t": 5, "s": '{"REGION":"EU","CODE":null}'}
    a = summary(
        ("T", 3, 3, 0, 0, None, [scoped, {"t": 9, "s": None}]),
        ("T", 1, 1, 0, 0, None, [scoped]),
        ("I", 2, 2, 1, 2, 7, []),
    )
    assert a.truncates == (Truncate(5, {"REGION": "EU", "CODE": None}), Truncate(9))
    b = summary(("T", 1, 1, 0, 0, None, [{"t": 2, "s": "{}"}, {"t": 9, "s": None}]))
    assert a.merge(b).truncates == (
        Truncate(2),
        Truncate(5, {"REGION": "EU", "CODE": None}),
        Truncate(9),
    )
    assert summary(("I", 2, 2, 1, 2, 7, [])).truncates == ()
