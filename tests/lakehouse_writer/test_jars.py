"""The writer's connector jars without this repository: resolved by Maven from its own list."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse_writer.runtime import jars


def test_the_writer_resolves_its_jars_with_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(jars.JARS_DIR_VARIABLE, str(tmp_path / "jars"))

    names = sorted(Path(p).name for p in jars.spark_jars())

    assert names == sorted(
        f"{artifact}-{version}.jar" for _, artifact, version in jars.SPARK_CONNECTORS
    )
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
