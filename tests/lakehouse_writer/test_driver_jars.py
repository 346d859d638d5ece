"""Which connector jars a driver the writer starts gets: a cluster master ships them too.

No Spark here: ``build_spark_session``'s choice of ``spark.jars`` (``tests/cluster`` runs it
against a real standalone cluster).
"""

from __future__ import annotations

import pytest

from lakehouse_writer.runtime import jars
from lakehouse_writer.runtime.session import _driver_jars


@pytest.fixture
def hand_filled(tmp_path, monkeypatch):
    """A ``LAKEHOUSE_JARS_DIR`` filled by hand (no stamp) and no Maven on PATH."""
    folder = tmp_path / "jars"
    folder.mkdir()
    for name in ("spark-sql-kafka-0-10_2.13-4.1.3.jar", "delta-spark_4.1_2.13-4.4.0.jar"):
        (folder / name).write_bytes(b"")
    monkeypatch.setenv(jars.JARS_DIR_VARIABLE, str(folder))
    monkeypatch.setenv("PATH", str(tmp_path))
    return sorted(str(p) for p in folder.glob("*.jar"))


def test_a_driver_started_by_the_writer_gets_the_connector_jars(hand_filled):
    assert _driver_jars({}) == hand_filled


@pytest.mark.parametrize("key", ["spark.jars", "spark.jars.packages"])
def test_jars_named_in_conf_are_left_as_given(hand_filled, key):
    assert _driver_jars({key: "x"}) == []
