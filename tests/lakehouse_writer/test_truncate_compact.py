"""The applied-TRUNCATE list stays as short as the table's truncates since its last reload."""

from __future__ import annotations

from lakehouse_writer.truncate import Truncate, compact


def test_latest_whole_table_truncate_covers_every_earlier_one():
    eu, us = {"REGION": "EU"}, {"REGION": "US"}
    log = [Truncate(10, eu), Truncate(20), Truncate(30, us), Truncate(40), Truncate(40, eu),
           Truncate(50, eu)]  # fmt: skip
    assert compact(log) == [Truncate(40), Truncate(50, {"REGION": "EU"})]


def test_scoped_truncates_alone_are_all_kept_once():
    log = [Truncate(30, {"A": "1"}), Truncate(10, {"A": "2"}), Truncate(30, {"A": "1"})]
    assert compact(log) == [Truncate(10, {"A": "2"}), Truncate(30, {"A": "1"})]
