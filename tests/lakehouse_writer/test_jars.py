"""The writer's jars without this repository: resolved by Maven from the running line's list."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse_writer.runtime import jars
from lakehouse_writer.runtime.lines import current_line, hadoop_version, spark_jar_folders


@pytest.mark.slow  # 3-10 s: make test-fast stays under 5 minutes
def test_the_writer_resolves_its_jars_with_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(jars.JARS_DIR_VARIABLE, str(tmp_path / "jars"))

    names = sorted(Path(p).name for p in jars.spark_jars())

    shipped = {jars.artifact_name(p.name) for f in spark_jar_folders() for p in f.glob("*.jar")}
    assert names == sorted(
        f"{artifact}-{version}.jar"
        for _, artifact, version in jars.coordinates()
        if artifact not in shipped
    )
    line = current_line()
    assert f"{line.delta_artifact}-{line.delta}.jar" in names  # the running line's Delta
    assert f"hadoop-azure-{hadoop_version()}.jar" in names  # at the running Spark's Hadoop
    assert jars.jar_dir() == tmp_path / "jars"  # the stamp holds: no second resolution
    assert not [p for p in tmp_path.iterdir() if p.name != "jars"], "staging left behind"


def test_without_maven_the_error_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(jars.JARS_DIR_VARIABLE, str(tmp_path / "jars"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn on it

    with pytest.raises(jars.JarsUnavailable) as raised:
        jars.spark_jars()

    message = str(raised.value)
    assert "Maven (mvn) was not found" in message and "LAKEHOUSE_JARS_DIR" in message
    assert str(tmp_path / "jars") in message
