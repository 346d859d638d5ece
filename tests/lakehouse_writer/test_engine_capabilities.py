"""Which tables an engine writes is asked once, before any step of a batch.

The delta-rs engine declines a history table (SCD type 2): its versions are Spark's to
compute (:mod:`lakehouse_writer.rules.history`). The router sends such a table to Spark with
that reason, and :func:`~lakehouse_writer.engines.table.apply_table` refuses it on delta-rs
before it reads a row, so a current-row MERGE can never be written into a history table.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.types import LongType, StringType

from lakehouse_writer.engines.base import Declined
from lakehouse_writer.engines.delta_rs.engine import DeltaRsEngine
from lakehouse_writer.engines.delta_rs.writes import DeltaRsWrites
from lakehouse_writer.engines.table import apply_table
from lakehouse_writer.tables.manager import TableInfo, TableRef


def _table(root: Path, history: bool) -> TableInfo:
    columns = {"ID": LongType(), "NAME": StringType()}
    return TableInfo(TableRef("NS", "T"), str(root / "T"), ("ID",), columns, history=history)


def test_delta_rs_declines_a_history_table_before_any_step(tmp_path):
    engine = DeltaRsEngine(DeltaRsWrites())
    with pytest.raises(Declined, match=r"a history table .*NS\.T"):
        apply_table(engine, None, _table(tmp_path, history=True), 0, "w1")  # no row is read
    assert not (tmp_path / "T").exists()


def test_delta_rs_writes_a_current_row_table(tmp_path):
    assert DeltaRsEngine(DeltaRsWrites()).declines(_table(tmp_path, history=False)) is None
