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
