"""``make test``'s two shards (tests/shards.py) cover the suite, each test file once."""

from __future__ import annotations

from pathlib import Path

from tests.shards import TESTS, TO_REST, TO_WRITER, WRITER_SHARD, merge_junit, shards


def _files(paths: list[str], ignore: list[str]) -> list[Path]:
    """The test modules pytest collects from ``paths`` with ``--ignore`` of ``ignore``."""
    repo = TESTS.parent
    found = [
        f
        for p in paths
        for f in ([repo / p] if p.endswith(".py") else (repo / p).rglob("test_*.py"))
    ]
    return [f for f in found if not any(f.is_relative_to(repo / i) for i in ignore)]


def test_every_test_file_is_in_exactly_one_shard(tmp_path: Path) -> None:
    ran = [f for shard in shards(tmp_path) for f in _files(shard.paths, shard.ignore)]
    every = [f for f in TESTS.rglob("test_*.py") if "support" not in f.parts]
    assert sorted(ran) == sorted(set(ran)), "a file runs in two shards"
    assert set(every) == set(ran), f"not run by make test: {set(every) - set(ran)}"


def test_the_writer_shard_holds_the_in_process_spark_suites(tmp_path: Path) -> None:
    writer, rest = shards(tmp_path)
    assert writer.paths[: len(WRITER_SHARD)] == [f"tests/{name}" for name in WRITER_SHARD]
    assert "tests/producer_lib" in rest.paths and "tests/cluster" in rest.paths
    assert writer.log != rest.log


def test_a_moved_path_runs_in_its_new_shard_and_is_ignored_by_the_other(tmp_path: Path) -> None:
    writer, rest = shards(tmp_path)
    for moved, into, other in ((TO_WRITER, writer, rest), (TO_REST, rest, writer)):
        paths = [f"tests/{name}" for name in moved]
        assert all((TESTS.parent / path).exists() for path in paths), "a moved path is gone"
        assert set(paths) <= set(into.paths) and other.ignore == paths
        assert not set(paths) & set(into.ignore)


def test_the_shards_junit_reports_merge_into_the_one_asked_for(tmp_path: Path) -> None:
    one, two = tmp_path / "r.xml.writer", tmp_path / "r.xml.rest"
    one.write_text('<testsuites><testsuite name="a"><testcase name="x"/></testsuite></testsuites>')
    two.write_text('<testsuites><testsuite name="b"><testcase name="y"/></testsuite></testsuites>')
    merge_junit(tmp_path / "build" / "r.xml", [one, two])
    merged = (tmp_path / "build" / "r.xml").read_text()
    assert merged.index('name="a"') < merged.index('name="b"') and merged.count("<testcase") == 2
    assert not one.exists() and not two.exists()
