"""Which jars a driver the writer starts gets: a cluster master ships them too.

No Spark here: ``build_spark_session``'s choice of ``spark.jars`` (``tests/cluster`` runs it
against a real standalone cluster).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse_writer.runtime import jars
from lakehouse_writer.runtime.lines import current_line
from lakehouse_writer.runtime.session import _driver_jars, session_settings

# Not a local master: its local file system would be compiled (and cached) without javac here.
CLUSTER = "spark://127.0.0.1:7077"


@pytest.fixture
def hand_filled(tmp_path, monkeypatch):
    """A ``LAKEHOUSE_JARS_DIR`` filled by hand (no stamp) and no Maven on PATH."""
    folder = tmp_path / "jars"
    folder.mkdir()
    for name in ("delta-spark_4.1_2.13-4.4.0.jar", "spark-sql-kafka-0-10_2.13-4.1.3.jar"):
        (folder / name).write_bytes(b"")
    monkeypatch.setenv(jars.JARS_DIR_VARIABLE, str(folder))
    monkeypatch.setenv("PATH", str(tmp_path))
    return sorted(str(p) for p in folder.glob("*.jar"))


def test_a_driver_started_by_the_writer_gets_the_connector_jars(hand_filled):
    assert _driver_jars({}) == hand_filled


def test_jars_the_user_names_are_added_to_the_connectors(hand_filled):
    conf = {"spark.jars": "/opt/mine/postgresql-42.7.4.jar"}

    settings = session_settings(CLUSTER, _driver_jars(conf), conf)

    assert settings["spark.jars"].split(",") == [*hand_filled, "/opt/mine/postgresql-42.7.4.jar"]


def test_packages_the_user_names_are_added_to_the_connectors(hand_filled):
    conf = {"spark.jars.packages": "org.postgresql:postgresql:42.7.4"}

    settings = session_settings(CLUSTER, _driver_jars(conf), conf)

    assert settings["spark.jars"].split(",") == hand_filled  # Ivy adds the package to them
    assert settings["spark.jars.packages"] == "org.postgresql:postgresql:42.7.4"


def test_a_connector_the_user_names_replaces_ours_of_that_artifact(hand_filled):
    conf = {"spark.jars.packages": "io.delta:delta-spark_4.1_2.13:4.4.1"}

    settings = session_settings(CLUSTER, _driver_jars(conf), conf)

    assert [Path(j).name for j in settings["spark.jars"].split(",")] == [
        "spark-sql-kafka-0-10_2.13-4.1.3.jar"
    ]


def test_when_the_user_names_every_connector_maven_is_not_asked(hand_filled, monkeypatch):
    given = ",".join(
        f"/opt/jars/{artifact}-{version}.jar" for _, artifact, version in current_line().connectors
    )
    monkeypatch.delenv(jars.JARS_DIR_VARIABLE)  # would Maven be asked, it is not on PATH

    assert _driver_jars({"spark.jars": given}) == []
    assert session_settings(CLUSTER, [], {"spark.jars": given})["spark.jars"] == given
