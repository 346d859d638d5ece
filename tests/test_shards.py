"""``make test-parallel``'s two shards (tests/shards.py) cover the suite, each test folder once."""

from __future__ import annotations

from pathlib import Path

from tests.shards import TESTS, WRITER_SHARD, shards


def test_every_test_folder_and_file_is_in_exactly_one_shard(tmp_path: Path) -> None:
    parts = shards(tmp_path)
    covered = [path.removeprefix("tests/") for shard in parts for path in shard.paths]
    expected = {
        p.name
        for p in TESTS.iterdir()
        if (p.is_dir() and any(p.rglob("test_*.py"))) or p.name.startswith("test_")
    }
    assert sorted(covered) == sorted(set(covered)), "a folder runs in two shards"
    assert expected <= set(covered), f"not run by make test: {expected - set(covered)}"
    assert not set(covered) & {"support", "__pycache__"}


def test_the_writer_shard_holds_the_in_process_spark_suites(tmp_path: Path) -> None:
    writer, rest = shards(tmp_path)
    assert writer.paths == [f"tests/{name}" for name in WRITER_SHARD]
    assert "tests/producer_lib" in rest.paths and "tests/cluster" in rest.paths
    assert writer.log != rest.log
