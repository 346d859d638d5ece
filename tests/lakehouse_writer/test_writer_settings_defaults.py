"""The writer's defaults agree with the producer's: the catalog topic, and usable paths."""

from __future__ import annotations

import re

import pytest

from lakehouse_writer.settings import DEFAULT_TOPICS_REGEX, LakehouseSettings


def test_the_writer_reads_the_catalog_the_producer_writes(monkeypatch):
    monkeypatch.delenv("LAKEHOUSE_SCHEMAS_TOPIC", raising=False)
    monkeypatch.delenv("FLOW_SCHEMAS_TOPIC", raising=False)
    assert LakehouseSettings().schemas_topic == "_flow_schemas"
    monkeypatch.setenv("FLOW_SCHEMAS_TOPIC", "_team_schemas")  # one variable for both sides
    assert LakehouseSettings().schemas_topic == "_team_schemas"


@pytest.mark.parametrize("topic", ["_flow_schemas", "_schemas", "__consumer_offsets"])
def test_catalog_and_internal_topics_are_not_read_as_rows(topic):
    assert re.fullmatch(DEFAULT_TOPICS_REGEX, topic) is None
    assert re.fullmatch(DEFAULT_TOPICS_REGEX, "shop.orders") is not None


def test_relative_paths_are_made_absolute_and_uris_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = LakehouseSettings(
        LAKEHOUSE_PATH="./lake", LAKEHOUSE_CHECKPOINT_PATH="abfss://c@acct.dfs.core.windows.net/ck"
    )
    assert settings.lakehouse_path == str(tmp_path / "lake")
    assert settings.checkpoint_path == "abfss://c@acct.dfs.core.windows.net/ck"


BLANK_MEANS_DEFAULT = {
    "LAKEHOUSE_APPLY_WORKERS": ("apply_workers", 4),
    "LAKEHOUSE_CONNECT_TIMEOUT_S": ("connect_timeout_s", 30.0),
    "SPARK_MASTER": ("spark_master", None),
    "LAKEHOUSE_MAINTAIN_INTERVAL_S": ("maintain_interval_s", None),
    "LAKEHOUSE_COMPACT_MIN_FILES": ("compact_min_files", 16),
    "FLOW_SCHEMAS_TOPIC": ("schemas_topic", "_flow_schemas"),
}


@pytest.mark.parametrize("variable", BLANK_MEANS_DEFAULT)
def test_an_empty_variable_means_its_default_as_it_always_did(variable, monkeypatch, tmp_path):
    """These were read with os.environ.get(...).strip() or default before they were fields."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAKEHOUSE_SCHEMAS_TOPIC", raising=False)
    monkeypatch.setenv(variable, " ")
    field, default = BLANK_MEANS_DEFAULT[variable]
    assert getattr(LakehouseSettings(), field) == default
