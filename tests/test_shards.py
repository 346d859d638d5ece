"""``make test``'s two shards (tests/shards.py) cover the suite, each test file once."""

from __future__ import annotations

from pathlib import Path

from tests.shards import TESTS, TO_REST, WRITER_SHARD, merge_junit, shards


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


def test_the_writer_files_moved_to_the_rest_run_there_only(tmp_path: Path) -> None:
    writer, rest = shards(tmp_path)
    moved = [f"tests/{name}" for name in TO_REST]
    assert all((TESTS.parent / path).is_file() for path in moved), "a moved file is gone"
    assert writer.ignore == moved and set(moved) <= set(rest.paths) and not rest.ignore


def test_the_shards_junit_reports_merge_into_the_one_asked_for(tmp_path: Path) -> None:
    one, two = tmp_path / "r.xml.writer", tmp_path / "r.xml.rest"
    one.write_text('<testsuites><testsuite name="a"><testcase name="x"/></testsuite></testsuites>')
    two.write_text('<testsuites><testsuite name="b"><testcase name="y"/></testsuite></testsuites>')
    merge_junit(tmp_path / "build" / "r.xml", [one, two])
    merged = (tmp_path / "build" / "r.xml").read_text()
    assert merged.index('name="a"') < merged.index('name="b"') and merged.count("<testcase") == 2
    assert not one.exists() and not two.exists()
