"""The history rules as SQL (lakehouse_writer.rules.history), run by DuckDB, against a model.

A history table held in DuckDB takes each batch as the writer's MERGE would (the source's
``drop`` rows deleted, its ``keep`` rows replacing or inserting the version of their key and
``__valid_from``); the versions must equal ``tests/support/history_model.py``'s. Spark runs
the same text against Delta tables in test_history_tables.py.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import duckdb
import pytest

from lakehouse_writer.rules.dialect import DUCKDB
from lakehouse_writer.rules.history import (
    HISTORY_ACTION,
    closing_source,
    history_source,
    stored_versions,
)
from lakehouse_writer.rules.sql import TableShape
from lakehouse_writer.rules.truncate import Truncate
from tests.support.history_model import Event, History
from tests.support.rule_rows import T0, batch_rows

SHAPE = TableShape(
    columns={
        "ID": "bigint",
        "NAME": "string",
        "__change_type": "string",
        "__change_time": "timestamp",
        "__source_rowid": "string",
        "__valid_from": "timestamp",
        "__valid_to": "timestamp",
        "__is_current": "boolean",
    },
    keys=("ID",),
    technical=frozenset({"__change_type", "__change_time", "__source_rowid"}),
)
KINDS = {"I": "upsert", "U": "upsert", "A": "upsert", "P": "archive", "D": "delete", "G": "erase"}


class Lake:
    """A history table in DuckDB, written as the engines' MERGE writes it."""

    def __init__(self) -> None:
        self.con = duckdb.connect()
        self.con.execute("SET TimeZone = 'UTC'")
        self.con.execute(
            'CREATE TABLE h ("ID" BIGINT, "NAME" VARCHAR, "__change_type" VARCHAR, '
            '"__change_time" TIMESTAMPTZ, "__source_rowid" VARCHAR, "__valid_from" TIMESTAMPTZ, '
            '"__valid_to" TIMESTAMPTZ, "__is_current" BOOLEAN)'
        )

    def apply(self, rows: list[tuple[int, str, int, str]]) -> None:
        """(ID, change type, seconds after T0, NAME) rows, offsets 0, 1, ... of one partition."""
        self.con.register("r_arrow", batch_rows(rows))
        self.con.execute("CREATE OR REPLACE TABLE r AS SELECT * FROM r_arrow")
        self.con.execute("CREATE OR REPLACE TABLE s AS " + stored_versions("h", "r", SHAPE, DUCKDB))
        present = batch_rows(rows).column_names
        self._merge(history_source("r", "s", SHAPE, present, DUCKDB, before=False))

    def truncate(self, seconds: int, name: str | None = None) -> None:
        """A TRUNCATE at ``seconds``; scoped to NAME = ``name`` when given."""
        scope = {} if name is None else {"NAME": name}
        micros = int((T0 + timedelta(seconds=seconds)).timestamp() * 1_000_000)
        self._merge(closing_source("h", SHAPE, [Truncate(micros, scope)], DUCKDB))

    def _merge(self, sql: str) -> None:
        for row in self.con.sql(sql).to_arrow_table().to_pylist():
            action = row.pop(HISTORY_ACTION)
            where = [row["ID"], row["__valid_from"]]
            self.con.execute('DELETE FROM h WHERE "ID" = ? AND "__valid_from" = ?', where)
            if action == "keep":
                self.con.execute(
                    f"INSERT INTO h VALUES ({', '.join('?' * len(row))})", list(row.values())
                )

    def versions(self) -> list[tuple[Any, ...]]:
        """(ID, NAME, change type, valid from, valid to, current) by key and valid-from."""
        found = self.con.sql('SELECT * FROM h ORDER BY "ID", "__valid_from"').to_arrow_table()
        return [
            (
                r["ID"],
                r["NAME"],
                r["__change_type"],
                _seconds(r["__valid_from"]),
                _seconds(r["__valid_to"]),
                r["__is_current"],
            )
            for r in found.to_pylist()
        ]


def _seconds(at: datetime | None) -> int | None:
    return None if at is None else int((at - T0).total_seconds())


def _modelled(events: list[Event]) -> list[tuple[Any, ...]]:
    return [
        (v.key, v.payload["NAME"], v.code, v.valid_from, v.valid_to, v.valid_to is None)
        for v in History().apply(events).rows()
    ]


def _event(row: tuple[int, str, int, str]) -> Event:
    key, code, time, name = row
    return Event(time, KINDS[code], key, {"NAME": name}, code)


def test_an_update_closes_the_version_a_delete_ends_it_an_archive_keeps_the_payload():
    lake = Lake()
    lake.apply([(1, "I", 1, "a"), (2, "I", 1, "b"), (1, "U", 3, "a3")])
    lake.apply([(1, "P", 5, "ignored"), (2, "D", 4, "b")])
    assert lake.versions() == [
        (1, "a", "I", 1, 3, False),
        (1, "a3", "U", 3, 5, False),
        (1, "a3", "P", 5, None, True),  # the archive keeps the stored payload
        (2, "b", "I", 1, 4, False),  # deleted at 4: no current version
    ]


def test_a_late_row_takes_its_place_and_an_archive_after_it_takes_its_payload():
    lake = Lake()
    lake.apply([(1, "I", 1, "a"), (1, "U", 5, "a5"), (1, "P", 7, "x")])
    lake.apply([(1, "U", 6, "late")])  # older than the archive: its payload is now the late one
    assert lake.versions() == [
        (1, "a", "I", 1, 5, False),
        (1, "a5", "U", 5, 6, False),
        (1, "late", "U", 6, 7, False),
        (1, "late", "P", 7, None, True),
    ]


def test_a_late_upsert_older_than_a_delete_ends_at_the_delete():
    lake = Lake()
    lake.apply([(1, "I", 1, "a"), (1, "D", 5, "a")])
    lake.apply([(1, "U", 3, "a3")])
    assert lake.versions() == [(1, "a", "I", 1, 3, False), (1, "a3", "U", 3, 5, False)]


def test_a_gdpr_delete_removes_every_version_up_to_it_and_keeps_what_comes_after():
    lake = Lake()
    lake.apply([(1, "I", 1, "a"), (1, "U", 2, "b"), (2, "I", 1, "other")])
    lake.apply([(1, "G", 3, "b"), (1, "I", 4, "new person")])
    assert lake.versions() == [
        (1, "new person", "I", 4, None, True),
        (2, "other", "I", 1, None, True),
    ]


def test_the_last_row_of_one_time_wins_and_a_replayed_batch_changes_nothing():
    lake = Lake()
    batch = [(1, "I", 1, "first"), (1, "U", 1, "second"), (2, "I", 2, "b")]
    lake.apply(batch)
    once = lake.versions()
    lake.apply(batch)
    assert (
        once
        == lake.versions()
        == [
            (1, "second", "U", 1, None, True),
            (2, "b", "I", 2, None, True),
        ]
    )


def test_a_truncate_closes_what_it_covers_and_a_reload_opens_new_versions():
    lake = Lake()
    lake.apply([(1, "I", 1, "a"), (2, "I", 1, "b"), (3, "I", 1, "a")])
    lake.truncate(4, name="a")  # scoped: NAME = 'a'
    lake.apply([(1, "P", 4, "p")])  # an archive after the TRUNCATE finds nothing: its own payload
    lake.truncate(6)
    lake.apply([(2, "I", 6, "b6")])  # the reload's row, at the TRUNCATE's time
    assert lake.versions() == [
        (1, "a", "I", 1, 4, False),
        (1, "p", "P", 4, 6, False),
        (2, "b", "I", 1, 6, False),
        (2, "b6", "I", 6, None, True),
        (3, "a", "I", 1, 4, False),
    ]
    lake.apply([(1, "U", 7, "u7")])  # a later change leaves the archive's payload as it was
    assert (1, "p", "P", 4, 6, False) in lake.versions()


@pytest.mark.parametrize("seed", range(20))
def test_random_changes_in_random_batches_equal_the_model(seed):
    """Changes of 4 keys at distinct times, in batches cut at random; some upserts arrive late
    (not those a tombstone or TRUNCATE would stop in the writer: the next change of their key
    is not a delete)."""
    rng = random.Random(seed)
    times = rng.sample(range(1, 300), 30)
    changes = [
        (rng.randrange(4), rng.choice("IUAPPDG" if rng.random() < 0.2 else "IUAPD"), t, f"v{t}")
        for t in sorted(times)
    ]
    late = set()
    for i, (key, code, _, _) in enumerate(changes):
        following = [c for c in changes[i + 1 :] if c[0] == key]
        later = {c[1] for c in following}
        if code in "IUA" and following and following[0][1] in "IUAP" and "G" not in later:
            if rng.random() < 0.3:
                late.add(i)
    arrival = [c for i, c in enumerate(changes) if i not in late]
    arrival += [changes[i] for i in sorted(late, key=lambda _: rng.random())]
    lake = Lake()
    start = 0
    while start < len(arrival):
        size = rng.randint(1, 8)
        lake.apply(arrival[start : start + size])
        start += size
    assert lake.versions() == _modelled([_event(c) for c in changes]), f"seed {seed}"
