"""Which failed query starts mean "another writer took this new checkpoint" (pure function).

The race itself runs in ``tests/faults/test_checkpoint_race.py``; CI saw its loser fail on
the checksum file Hadoop renames beside ``metadata``, which the loser then reported as a
plain ``FileAlreadyExistsException``.
"""

from __future__ import annotations

import pytest

from lakehouse_writer.commit.checkpoint_guard import concurrent_start

CKPT = "/tmp/ckpt0"


@pytest.mark.parametrize(
    "cause",
    [
        f"FileAlreadyExistsException: Rename destination file:{CKPT}/metadata already exists.",
        f"FileAlreadyExistsException: Rename destination file:{CKPT}/.metadata.crc already exists.",
        f"FileAlreadyExistsException: file:{CKPT}/metadata",
        "IllegalArgumentException: Cannot start query with name lakehouse-writer-1a2b3c4d as a "
        "query with that name is already active in this SparkSession",
    ],
)
def test_a_lost_race_for_the_checkpoint_says_run_one_writer_per_checkpoint(cause):
    error = concurrent_start(cause, CKPT)
    assert error is not None
    assert "another writer started with the checkpoint /tmp/ckpt0" in str(error)
    assert "run one writer per checkpoint" in str(error)


@pytest.mark.parametrize(
    "cause",
    [
        f"FileAlreadyExistsException: Rename destination file:{CKPT}/offsets/3 already exists.",
        f"FileAlreadyExistsException: file:{CKPT}/metadata.json already exists",
        f"IOException: Rename destination file:{CKPT}/metadata already exists.",
        "IllegalArgumentException: the topics regex is not valid",
    ],
)
def test_other_start_failures_are_not_taken_for_the_race(cause):
    assert concurrent_start(cause, CKPT) is None
