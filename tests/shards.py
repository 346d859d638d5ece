"""``make test`` and ``make test-fast``: two pytest runs side by side, on one broker.

Much of the suite's time is spent waiting — for a JVM to start, a broker to answer, a Spark job
to be scheduled, pip to install a wheel — and one pytest run keeps one of the two cores idle
a third of the time; two runs fill it. The writer's in-process Spark tests
(``tests/lakehouse_writer``, ``tests/ops``) run in one shard; everything else (the producer
side, packaging, flows, and the suites that start clusters and brokers of their own) in the
other; a few paths move between the two (``TO_WRITER``, ``TO_REST``) so that they take about
as long, in ``make test`` and in ``make test-fast``. A folder added to ``tests/`` lands in the
second shard without an edit here. ``make test-serial`` runs the suite as one pytest run.

The devstack broker and schema registry are started once, before the shards (each shard's
session fixtures then find them running and leave them up), and stopped at the end if this
run started them. Each shard writes to its own log and its own ``--basetemp``; a line per
minute says how far each has come, and each shard's whole output is printed when it ends.
A ``--junitxml=PATH`` is written by each shard to a file of its own and merged into ``PATH``.
The exit code is the first non-zero one of the shards (pytest's codes), else 0; a shard that a
selection (``-k``, ``-m``) leaves without a test does not count, unless both are left so.

    python -m tests.shards [PYTEST ARGS...]        # e.g. -x, -k name, --durations=25
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
WRITER_SHARD = ("lakehouse_writer", "ops")  # a SparkSession in the pytest process
# Moved between the shards so that they take about as long (build/test-report.xml, 2026-12-07):
# the producer's Kafka tests, 82 s of make test-fast's 293 s (90 s in make test), to the writer's;
# the writer's tests that start Spark processes of their own (~360 s of its 2,400 s) and its
# slowest fast file (the history rules on DuckDB, 21 s) to the rest.
TO_WRITER = ("producer_lib/kafka",)
TO_REST = (
    "lakehouse_writer/test_catalog_hive.py",
    "lakehouse_writer/test_writer_crash.py",
    "lakehouse_writer/test_writer_relative_paths.py",
    "lakehouse_writer/test_history_rules.py",
)
_JUNIT = "--junitxml="
PROGRESS_EVERY_S = 60
_NOTHING_COLLECTED = 5  # pytest's exit code when a selection leaves a shard no test
_PERCENT = re.compile(r"\[\s*(\d+)%\]")


@dataclass
class Shard:
    """One pytest run over some of ``tests/``."""

    name: str
    paths: list[str]
    log: Path
    ignore: list[str] = field(default_factory=list)  # files under paths another shard runs
    process: subprocess.Popen[bytes] | None = None

    def start(self, args: Sequence[str], basetemp: Path) -> None:
        """Start pytest on the shard's paths; its output goes to :attr:`log`."""
        command = [sys.executable, "-m", "pytest", *self.paths, f"--basetemp={basetemp}"]
        command += [f"--ignore={path}" for path in self.ignore]
        for arg in args:  # a --junitxml becomes the shard's own report
            asked = _junit(arg)
            command.append(f"{_JUNIT}{self.report(asked)}" if asked else arg)
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)

    def report(self, asked: Path) -> Path:
        """The shard's own JUnit report beside the one asked for (``report.xml.writer``)."""
        return asked.with_name(f"{asked.name}.{self.name}")

    def progress(self) -> str:
        """The last ``[ nn%]`` pytest printed, or what the shard is doing."""
        if self.process is not None and self.process.poll() is not None:
            return f"done (exit {self.process.returncode})"
        found = _PERCENT.findall(self.log.read_text(errors="replace")) if self.log.exists() else []
        return f"{found[-1]}%" if found else "collecting"


def shards(log_dir: Path) -> list[Shard]:
    """The writer's shard and the rest (every other entry of ``tests/``, new ones included)."""
    rest = sorted(p.name for p in TESTS.iterdir() if p.name not in WRITER_SHARD and _has_tests(p))
    to_writer, to_rest = ([f"tests/{name}" for name in moved] for moved in (TO_WRITER, TO_REST))
    writer = [f"tests/{name}" for name in WRITER_SHARD] + to_writer
    return [
        Shard("writer", writer, log_dir / "writer.log", ignore=to_rest),
        Shard(
            "rest", [f"tests/{name}" for name in rest] + to_rest, log_dir / "rest.log", to_writer
        ),
    ]


def _has_tests(path: Path) -> bool:
    """A test module, or a folder holding one (not ``support/``, not a cache)."""
    if path.is_file():
        return path.name.startswith("test_") and path.suffix == ".py"
    return path.name != "support" and any(path.rglob("test_*.py"))


@contextlib.contextmanager
def shared_services() -> Iterator[None]:
    """The devstack broker and registry, up for the whole run (unless configured elsewhere)."""
    from devstack import broker, registry

    with contextlib.ExitStack() as stack:
        if not os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
            stack.enter_context(broker.bootstrap_servers())
        if not os.environ.get("SCHEMA_REGISTRY_URL"):
            started_here = registry.status() is None
            layout = registry.up()
            if started_here:
                stack.callback(registry.down, layout)
        yield


def run(args: Sequence[str]) -> int:
    """Run the shards side by side; return the exit code."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="shards-") as folder, shared_services():
        work = Path(folder)
        parts = shards(work)
        try:
            for shard in parts:
                shard.start(args, work / f"tmp-{shard.name}")
            _report_until_done(parts, started)
        finally:  # an interrupt stops both runs, not only this one
            for shard in parts:
                if shard.process is not None and shard.process.poll() is None:
                    shard.process.terminate()
                    shard.process.wait()
        for shard in parts:
            print(f"\n{'=' * 30} shard {shard.name}: {' '.join(shard.paths)} {'=' * 30}")
            sys.stdout.write(shard.log.read_text(errors="replace"))
        codes = [shard.process.returncode for shard in parts if shard.process is not None]
    for asked in filter(None, map(_junit, args)):
        merge_junit(asked, [s.report(asked) for s in parts])
    minutes = (time.monotonic() - started) / 60
    print(f"\nshards: {', '.join(f'{s.name}={c}' for s, c in zip(parts, codes, strict=True))}")
    print(f"whole suite: {minutes:.1f} min")
    ran = [code for code in codes if code != _NOTHING_COLLECTED] or codes  # a -k for one shard
    return next((code for code in ran if code != 0), 0)


def _junit(arg: str) -> Path | None:
    """The report a ``--junitxml=PATH`` argument asks for; None for any other argument."""
    return Path(arg.removeprefix(_JUNIT)) if arg.startswith(_JUNIT) else None


def merge_junit(target: Path, parts: Sequence[Path]) -> None:
    """One JUnit XML report of the shards' reports (each a ``<testsuites>``), which it removes."""
    merged = ElementTree.Element("testsuites")
    for part in parts:
        if part.exists():
            merged.extend(ElementTree.parse(part).getroot().iter("testsuite"))
            part.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    ElementTree.ElementTree(merged).write(target, encoding="utf-8", xml_declaration=True)


def _report_until_done(parts: Sequence[Shard], started: float) -> None:
    last = 0.0
    while any(s.process is not None and s.process.poll() is None for s in parts):
        time.sleep(1)
        if time.monotonic() - last >= PROGRESS_EVERY_S:
            last = time.monotonic()
            said = ", ".join(f"{s.name} {s.progress()}" for s in parts)
            print(f"[{(last - started) / 60:4.0f} min] {said}", flush=True)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
