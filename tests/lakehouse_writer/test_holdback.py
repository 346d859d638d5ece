"""Where a batch is cut so that it applies whole transactions in commit order (pure)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from lakehouse_writer.commit.state import BatchChanges, WriterState, _fold
from lakehouse_writer.read.commits import CommitRecord
from lakehouse_writer.read.holdback import cut_offsets
from lakehouse_writer.read.ranges import held_record, held_until

T = "orders"
COLUMNS = (
    "instance",
    "batch_id",
    "kind",
    "topic",
    "partition",
    "offset",
    "table",
    "version",
    "commit_id",
    "record",
    "error",
)  # the order of ``BatchChanges.rows``


def ours(topic: str) -> bool:
    return topic == T


def commit(offset: int, *parts: tuple[int, int, int], topic: str = T) -> CommitRecord:
    """A commit record at ``_commits`` offset ``offset`` writing ``(partition, min, max)``."""
    record = {
        "commit_id": f"c{offset}",
        "partitions": [
            {"topic": topic, "partition": p, "min_offset": lo, "max_offset": hi, "rows": 1}
            for p, lo, hi in parts
        ],
    }
    return CommitRecord.parse(json.dumps(record), "_commits", 0, offset)


def test_a_batch_holding_whole_transactions_is_not_cut():
    commits = [commit(0, (0, 0, 1), (1, 0, 0)), commit(1, (0, 2, 2))]
    cuts, holding = cut_offsets(commits, {(T, 0): (0, 3), (T, 1): (0, 1)}, {}, ours)
    assert (cuts, holding) == ({}, [])


def test_a_transaction_split_by_the_batch_end_waits_whole():
    # c1 wrote p0 offsets 2..3 and p1 offset 1; the batch ends before p0's offset 3
    commits = [commit(0, (0, 0, 1)), commit(1, (0, 2, 3), (1, 1, 1))]
    cuts, holding = cut_offsets(commits, {(T, 0): (0, 3), (T, 1): (0, 2)}, {}, ours)
    assert cuts == {(T, 0): 2, (T, 1): 1}
    assert [c.commit_id for c in holding] == ["c1"]


def test_a_later_transaction_waits_for_an_earlier_incomplete_one():
    # c0's row on p1 is beyond the batch; c1 (complete, on p0) must not overtake it
    commits = [commit(0, (1, 0, 0)), commit(1, (0, 0, 0))]
    cuts, holding = cut_offsets(commits, {(T, 0): (0, 1)}, {}, ours)
    assert cuts == {(T, 0): 0}
    assert [c.commit_id for c in holding] == ["c0", "c1"]


def test_a_cut_that_splits_an_earlier_transaction_moves_the_barrier_back():
    # c0 and c1 interleave on p0 (two producers); c1 is incomplete, so p0 is cut at 2,
    # which splits c0 (p0 offsets 1..3): c0 waits as well, from offset 1
    commits = [commit(0, (0, 1, 3)), commit(1, (0, 2, 2), (1, 0, 5))]
    cuts, _ = cut_offsets(commits, {(T, 0): (0, 4), (T, 1): (0, 3)}, {}, ours)
    assert cuts == {(T, 0): 1, (T, 1): 0}


def test_rows_already_processed_are_never_held_again():
    # c0 began before this batch (offset 0 was applied by an earlier batch)
    commits = [commit(0, (0, 0, 5))]
    cuts, _ = cut_offsets(commits, {(T, 0): (1, 3)}, {(T, 0): 0}, ours)
    assert cuts == {(T, 0): 1}


def test_commits_of_other_topics_hold_nothing_back():
    commits = [commit(0, (0, 0, 9), topic="theirs"), commit(1, (0, 0, 0))]
    cuts, holding = cut_offsets(commits, {(T, 0): (0, 1)}, {}, ours)
    assert (cuts, holding) == ({}, [])


def test_held_ranges_and_the_commits_position_survive_a_restart():
    changes = BatchChanges(offsets={(T, 0): 4}, held={(T, 0): (5, 9)}, awaits={0: 17})
    state = WriterState()
    for values in changes.rows("inst", 7):
        _fold(state, SimpleNamespace(**dict(zip(COLUMNS, values, strict=True))))
    assert (state.held, state.awaits, state.last_batch) == ({(T, 0): (5, 9)}, {0: 17}, 7)
    # a later batch that holds nothing replaces them
    later = {"kind": "offset", "batch_id": 8, "topic": T, "partition": 0, "offset": 9}
    _fold(state, SimpleNamespace(**later))
    assert (state.held, state.awaits) == ({}, {})
    assert held_until(held_record(9)) == 9


def test_a_run_once_reads_again_while_rows_stay_held_back_a_bounded_number_of_times(caplog):
    from lakehouse_writer.stream.job import ONCE_QUERIES, _held_at_end

    held = SimpleNamespace(state=WriterState(held={(T, 0): (5, 9)}))
    idle = SimpleNamespace(state=WriterState())
    assert not _held_at_end(idle, 1)  # type: ignore[arg-type]
    assert all(_held_at_end(held, n) for n in range(1, ONCE_QUERIES))  # type: ignore[arg-type]
    assert not _held_at_end(held, ONCE_QUERIES)  # type: ignore[arg-type]
    assert "run --once ends with rows held back partitions=1 (orders/0)" in caplog.text
