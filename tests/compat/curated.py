"""The curated tests a compat test runs in another Spark line's venv, and how it runs them.

Every row type once against the Spark engine (upsert, delete with before-images, truncate,
replace, GDPR delete, an append-only table) and one end-to-end run of the writer through
Kafka, poison rows rejected. ``run_on_line`` builds the line's venv if needed
(``devstack compat LINE``: its jars from Maven Central) and runs them there on the session's
broker; a venv that cannot be built fails the calling test with pip's or Maven's output.

Building a venv is a minute or two of pip and Maven, waiting mostly on the network and the
disk: :func:`build_early` starts it when the session starts (``conftest.py``), in a thread,
so the compat tests find it built instead of building it in their own time.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from devstack import compat
from devstack.errors import DevstackError

CURATED = [
    "tests/lakehouse_writer/test_apply_batch.py::test_upserts_keep_the_latest_row_and_never_overwrite_newer_rows",
    "tests/lakehouse_writer/test_apply_batch.py::test_deletes_archive_and_before_images_that_move_a_key",
    "tests/lakehouse_writer/test_apply_batch.py::test_truncate_in_a_batch_drops_older_rows_and_keeps_its_own_transaction",
    "tests/lakehouse_writer/test_apply_batch.py::test_replace_after_unscoped_truncate_appends_into_the_empty_table",
    "tests/lakehouse_writer/test_apply_batch.py::test_gdpr_delete_leaves_no_data_file_with_the_row",
    "tests/lakehouse_writer/test_apply_batch.py::test_append_only_table_appends_truncates_and_rejects_deletes",
    "tests/lakehouse_writer/test_writer_e2e.py::test_writer_applies_committed_transactions_and_rejects_poison[one-batch]",
]
_INNER_TIMEOUT_S = 600
_EARLY: dict[str, Future[compat.CompatEnv]] = {}  # the venvs build_early started, by line


def build_early(lines: Iterable[str]) -> None:
    """Start building the venvs of ``lines``, one after the other, in a background thread."""
    builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compat-venv")
    for line in sorted(set(lines) - set(_EARLY)):
        _EARLY[line] = builder.submit(compat.environment, line)
    builder.shutdown(wait=False)  # the thread ends when its builds are done


def run_on_line(line: str, kafka_bootstrap: str, tests: list[str] = CURATED) -> None:
    """Run ``tests`` with the venv of Spark ``line``; fail the calling test unless all pass."""
    early = _EARLY.get(line)
    try:
        env = early.result() if early is not None else compat.environment(line)
    except DevstackError as exc:
        pytest.fail(f"the Spark {line} venv could not be built: {exc}", pytrace=False)
    done = subprocess.run(
        [str(env.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=compat.REPO,
        # the session's broker: the inner run neither starts nor stops one; the venv's bin
        # first on PATH: Spark's Python workers must be of the driver's Python (4.0's: 3.12)
        env=env.env({**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}),
        capture_output=True,
        text=True,
        timeout=_INNER_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert f"{len(tests)} passed" in done.stdout, done.stdout[-2000:]
