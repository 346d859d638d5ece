"""The settings the writer gives the Spark session it starts (no Spark needed)."""

from __future__ import annotations

from lakehouse_writer.session import session_settings


def test_a_local_drain_runs_without_the_ui_and_a_long_lived_writer_serves_it():
    drain = session_settings("local[2]")
    assert drain["spark.ui.enabled"] == "false" and drain["spark.sql.shuffle.partitions"] == "2"
    assert session_settings("local[2]", ui=True)["spark.ui.enabled"] == "true"


def test_a_cluster_master_keeps_spark_s_own_settings_and_the_user_s_conf_wins():
    cluster = session_settings("spark://h:7077", jars=["/j/a.jar", "/j/b.jar"], ui=True)
    assert "spark.sql.shuffle.partitions" not in cluster
    assert cluster["spark.jars"] == "/j/a.jar,/j/b.jar"
    assert cluster["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    mine = session_settings("local[2]", conf={"spark.ui.enabled": "false"}, ui=True)
    assert mine["spark.ui.enabled"] == "false"
