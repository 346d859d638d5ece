"""The settings the writer gives the Spark session it starts (no Spark needed)."""

from __future__ import annotations

from pathlib import Path

from lakehouse_writer.runtime.session import session_settings


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


def test_a_local_master_gets_the_local_file_system_without_processes_and_conf_can_refuse_it():
    from lakehouse_writer.runtime.local_fs import (
        CLASS_PATH_KEY,
        FILE_CONTEXT_CLASS,
        FILE_CONTEXT_KEY,
        FILE_SYSTEM_CLASS,
        FILE_SYSTEM_KEY,
    )

    local = session_settings("local[2]", conf={CLASS_PATH_KEY: "/opt/mine.jar"})
    assert local[FILE_SYSTEM_KEY] == FILE_SYSTEM_CLASS
    assert local[FILE_CONTEXT_KEY] == FILE_CONTEXT_CLASS
    mine, classes = local[CLASS_PATH_KEY].split(":")
    assert mine == "/opt/mine.jar"  # the user's class path stays, in front
    assert (Path(classes) / "lakehouse" / "hadoop" / "NioLocalFileSystem.class").is_file()

    assert FILE_SYSTEM_KEY not in session_settings("spark://h:7077")  # executors lack it
    hadoop = "org.apache.hadoop.fs.LocalFileSystem"
    refused = session_settings("local[2]", conf={FILE_SYSTEM_KEY: hadoop})
    assert refused[FILE_SYSTEM_KEY] == hadoop and FILE_CONTEXT_KEY not in refused
    assert CLASS_PATH_KEY not in refused
