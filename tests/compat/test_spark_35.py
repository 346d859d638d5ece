"""The writer on the Spark 3.5 line (Fabric runtime 1.3: Spark 3.5, Delta 3.2, Scala 2.12).

Runs, from the main suite, a pytest in the 3.5 line's venv (``devstack compat 3.5``: built if
needed, its jars from Maven Central) over the tests that pass there: every row type once
against the Spark engine (upsert, delete with before-images, truncate, replace, GDPR delete,
an append-only table) and one end-to-end run of the writer through Kafka, poison rows
rejected (192-207 s on 2 cores; ``test_lines.py`` is run by hand there). A venv that
cannot be built fails this test with pip's or Maven's output.
"""

from __future__ import annotations

import os
import subprocess

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


@pytest.mark.slow
def test_the_row_types_and_the_writer_pass_on_spark_35(kafka_bootstrap):
    try:
        env = compat.environment("3.5")
    except DevstackError as exc:
        pytest.fail(f"the Spark 3.5 venv could not be built: {exc}", pytrace=False)
    done = subprocess.run(
        [str(env.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *CURATED],
        cwd=compat.REPO,
        # the session's broker: the inner run neither starts nor stops one
        env=env.env({**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert f"{len(CURATED)} passed" in done.stdout, done.stdout[-2000:]
