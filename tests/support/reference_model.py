"""An independent model of DESIGN's row semantics, and hypothesis strategies of change sequences.

A :class:`Sequence` is what one flow sends to one table: transactions (committed or aborted) of
changes of every row type. :func:`expected` says what the lakehouse table must hold afterwards,
following DESIGN.md ("Row types", "Ordering and time") and nothing of the writer's code:

- transactions apply in time order (one producer: commit order); aborted ones never exist.
  A :attr:`Sequence.late` transaction is the first in time but committed last, by a second
  producer on a second topic feeding the same table: the writer applies it after the others,
  and the table must come out as if it had come first (its rows are older; a delete keeps a
  tombstone). Such sequences have no ARCHIVE, whose stored payload depends on arrival order;
- a TRUNCATE at time t deletes the rows in its scope older than t: every stored row, none of
  its own transaction;
- within one transaction and one key, the last row by (partition, offset) wins, a BEFORE image
  counting as a delete of its key when its UPDATE moved the key (otherwise it does nothing);
- I/U/A/R upsert, D/X/G delete by key, P keeps the stored row and marks it archived
  (``__change_type`` = ``P``; with no stored row the archived image itself is kept);
- G also leaves no current data file holding the deleted image;
- a :attr:`Sequence.history` table (SCD type 2) keeps every version of a key
  (:func:`expected_history`, through ``tests/support/history_model.py``): each from its
  transaction to the next change of its key or a TRUNCATE covering it, a G removing every
  version of its key; its current versions are the table above;
- without a primary key the table is append-only: I/U/A/R append, T truncates, D/X/G are
  rejected;
- a sequence may change its table's schema between the writer's two runs (:data:`CHANGES`):
  a decimal widened or narrowed, a timestamp's unit from milliseconds to microseconds — the
  table then holds every value exactly as sent — or a change no Delta table takes (a scale
  that loses integer digits, a decimal turned into a long, another primary key): the table
  stops, and every row of the new version lands in ``_rejected``.

Every message carries a unique ``SEQ`` (a payload column) so a test can find each change's
partition and offset on Kafka, which the model needs to order the rows of a transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.support.history_model import Event, History

KEY_VALUES: dict[str, tuple[Any, ...]] = {"K1": (1, 2, 3), "K2": ("a", "b")}
REGIONS = ("A", "B", None)  # REGION: the nullable scope column
GROUPS = (1, 2)  # GRP: a non-nullable int scope column
NOTES = (None, "x", "yy", "ü")  # NOTE: a nullable payload column
UNITS = (None, 0, 1, 2)  # AMT and TS: a nullable decimal and timestamp, typed per version
PAYLOAD = ("REGION", "GRP", "NOTE", "AMT", "TS")
SEQ_BASE = 1000  # SEQ values never collide with the small ints of K1/GRP
UPSERTS, DELETES = ("I", "U", "A", "R"), ("D", "X", "G")
ACTIONS = {**dict.fromkeys(UPSERTS, "upsert"), **dict.fromkeys(DELETES, "delete"), "P": "archive"}
Position = tuple[int, int]  # (partition, offset)

# Schema changes between the writer's runs: (AMT's Avro decimal, or "long"), TS's unit, and
# whether the table stops (anything but a widening, a narrower decimal or a timestamp unit).
AMT_V1 = (10, 2)
CHANGES: dict[str, tuple[tuple[int, int] | str, str]] = {
    "widen": ((12, 4), "millis"),
    "narrow": ((6, 1), "millis"),
    "ts-unit": (AMT_V1, "micros"),
    "rescale": ((10, 4), "millis"),  # scale 4 at precision 10 loses two integer digits
    "to-long": ("long", "millis"),
    "key-none": (AMT_V1, "millis"),
    "key-narrower": (AMT_V1, "millis"),
}
STOPS = frozenset({"rescale", "to-long", "key-none", "key-narrower"})
_NOON = datetime(2021, 6, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Change:
    """One change row as the flow produces it.

    Attributes:
        code: The row type (``__change_type``).
        values: Payload by column (``SEQ`` included); key columns of the table's key first.
        partition: Explicit partition, or None for the producer's default (the key's).
        rowid: ``__source_rowid``; a BEFORE image and its UPDATE may share one.
        pair: Pair number shared by a BEFORE image and its UPDATE.
        scope: TRUNCATE scope ``{column: value}``; None truncates the whole table.
    """

    code: str
    values: Mapping[str, Any]
    partition: int | None = None
    rowid: str | None = None
    pair: int | None = None
    scope: Mapping[str, Any] | None = None

    @property
    def seq(self) -> int:
        """The change's unique serial number (column ``SEQ``)."""
        return int(self.values["SEQ"])


@dataclass(frozen=True)
class Transaction:
    """The changes of one producer transaction, in produce order."""

    changes: tuple[Change, ...]
    committed: bool = True


@dataclass(frozen=True)
class Sequence:
    """What one flow sends to one table.

    Attributes:
        name: Table name (namespace chosen by the test).
        keys: Primary key columns; empty for an append-only table.
        partitions: Partitions of the topic.
        transactions: In produce (= time) order.
        first_run: Transactions produced before the writer's first run; the rest come after
            it and are applied by a second run.
        late: Transaction 0 is a second producer's, on a second topic: it begins first (its
            rows are the oldest) and commits after the writer applied the others.
        history: The table keeps every version of a key (``set_history("scd2")``).
    """

    name: str
    keys: tuple[str, ...]
    partitions: int
    transactions: tuple[Transaction, ...]
    first_run: int = 0
    change: str | None = None
    late: bool = False
    history: bool = False

    @property
    def columns(self) -> tuple[str, ...]:
        """Payload columns of the table, in table order."""
        return (*(self.keys or ("K1",)), *PAYLOAD, "SEQ")

    def changes(self) -> Iterable[tuple[Transaction, Change]]:
        """Every change with its transaction, in produce order."""
        return ((t, c) for t in self.transactions for c in t.changes)

    def version(self, index: int) -> int:
        """The schema version transaction ``index`` is produced with (2 after a change)."""
        return 2 if self.change is not None and index >= self.first_run else 1

    def keys_of(self, version: int) -> tuple[str, ...]:
        """The primary key of schema ``version``."""
        if version == 1 or self.change not in ("key-none", "key-narrower"):
            return self.keys
        return () if self.change == "key-none" else self.keys[:1]

    def amount_type(self, version: int) -> tuple[int, int] | str:
        """AMT's type in schema ``version``: (precision, scale), or ``"long"``."""
        return AMT_V1 if version == 1 or self.change is None else CHANGES[self.change][0]

    def time_unit(self, version: int) -> str:
        """TS's unit in schema ``version``: ``millis`` or ``micros``."""
        return "millis" if version == 1 or self.change is None else CHANGES[self.change][1]

    def typed(self, version: int, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` as produced with schema ``version``: AMT and TS from their units."""
        amount, unit = values.get("AMT"), values.get("TS")
        kind = self.amount_type(version)
        if amount is not None:
            amount = amount * 11 if kind == "long" else _decimal(amount, kind[1])  # type: ignore[index]
        if unit is not None:
            fine = timedelta(microseconds=123_457 if self.time_unit(version) == "micros" else 0)
            unit = _NOON + timedelta(seconds=unit, milliseconds=250) + fine
        return {**values, "AMT": amount, "TS": unit}


def _decimal(unit: int, scale: int) -> Decimal:
    """11 times ``unit`` with ``scale`` decimals of 2345: 11.23, 11.2345, 11.2 ..."""
    return Decimal(unit * 11) + Decimal("0.2345").quantize(Decimal(1).scaleb(-scale), "ROUND_DOWN")


@dataclass(frozen=True)
class Expected:
    """What the lakehouse must show after a sequence.

    Attributes:
        rows: Sorted table rows: the payload columns, then ``__change_type``.
        rejected: SEQs of the rows that must land in ``_rejected``.
        purged: SEQs of images a GDPR delete removed: no current data file may hold them.
    """

    rows: list[tuple[Any, ...]]
    rejected: frozenset[int]
    purged: frozenset[int]


def sort_key(row: tuple[Any, ...]) -> tuple[tuple[bool, str], ...]:
    """Order rows holding None next to values."""
    return tuple((v is None, str(v)) for v in row)


def normalized(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``rows`` sorted, a decimal without trailing zeros, a timestamp naive in UTC.

    The table shows a decimal at its column's scale (``11.20`` for ``11.2`` sent at scale 1)
    and a timestamp without a zone (Spark's session is UTC).
    """

    def one(value: Any) -> Any:
        if isinstance(value, Decimal):
            return value.normalize()
        if isinstance(value, datetime) and value.tzinfo is not None:
            return value.astimezone(UTC).replace(tzinfo=None)
        return value

    return sorted((tuple(one(v) for v in row) for row in rows), key=sort_key)


def _truncate(rows: dict[Any, tuple[Mapping[str, Any], str]], txn: Transaction) -> None:
    """Every stored row is older than ``txn``: delete those in the scope of its TRUNCATEs."""
    for scope in (c.scope or {} for c in txn.changes if c.code == "T"):
        for key in [k for k, (v, _) in rows.items() if all(v[c] == x for c, x in scope.items())]:
            del rows[key]


def _applied(seq: Sequence) -> tuple[list[tuple[int, Transaction]], frozenset[int]]:
    """The committed transactions the table takes (with their index), and the SEQs it refuses.

    A schema change the table cannot take stops it: every row of the new version is refused.
    """
    committed = [(i, t) for i, t in enumerate(seq.transactions) if t.committed]
    if seq.change not in STOPS:
        return committed, frozenset()
    refused = frozenset(c.seq for i, t in committed if i >= seq.first_run for c in t.changes)
    return [(i, t) for i, t in committed if i < seq.first_run], refused


def expected(seq: Sequence, positions: Mapping[int, Position]) -> Expected:
    """The table DESIGN's semantics give for ``seq``; ``positions``: (partition, offset) by SEQ."""
    if not seq.keys:
        return _expected_append_only(seq)
    rows: dict[tuple[Any, ...], tuple[Mapping[str, Any], str]] = {}
    purged: set[int] = set()
    applied, refused = _applied(seq)
    for index, txn in applied:
        txn = replace(
            txn,
            changes=tuple(
                replace(c, values=seq.typed(seq.version(index), c.values)) for c in txn.changes
            ),
        )
        _truncate(rows, txn)
        for key, (action, change) in _winners(seq, txn, positions).items():
            stored = rows.get(key)
            if action == "delete":
                rows.pop(key, None)
                if change.code == "G" and stored is not None:
                    purged.add(int(stored[0]["SEQ"]))
            elif action == "archive":
                rows[key] = (stored[0] if stored else change.values, "P")
            else:
                rows[key] = (change.values, change.code)
    table = [(*(v.get(c) for c in seq.columns), code) for v, code in rows.values()]
    return Expected(normalized(table), refused, frozenset(purged))


def expected_history(seq: Sequence, positions: Mapping[int, Position]) -> list[tuple[Any, ...]]:
    """The versions of a history table: payload columns, ``__change_type``, the numbers (1
    first, as :func:`describe`) of the transactions it is valid from and to (None: current),
    and whether it is current; sorted."""
    applied, _ = _applied(seq)
    events: list[Event] = []
    for index, txn in applied:
        for change in (c for c in txn.changes if c.code == "T"):
            scope = change.scope or {}
            events.append(Event(index + 1, "truncate", covers=_covers(scope)))
        for key, (action, change) in _winners(seq, txn, positions).items():
            kind = "erase" if change.code == "G" else action
            values = seq.typed(seq.version(index), change.values)
            events.append(Event(index + 1, kind, key, values, change.code))
    return normalized(
        (
            *(v.payload.get(c) for c in seq.columns),
            v.code,
            v.valid_from,
            v.valid_to,
            v.valid_to is None,
        )
        for v in History().apply(events).rows()
    )


def _covers(scope: Mapping[str, Any]) -> Any:
    """Whether a version's payload is in a TRUNCATE's scope (as :func:`_truncate` says)."""
    return lambda payload: all(payload.get(c) == x for c, x in scope.items())


def _winners(
    seq: Sequence, txn: Transaction, positions: Mapping[int, Position]
) -> dict[tuple[Any, ...], tuple[str, Change]]:
    """Per key: the action of the transaction's last row by (partition, offset)."""
    updates = {c.pair: c for c in txn.changes if c.code == "U" and c.pair is not None}
    best: dict[tuple[Any, ...], tuple[Position, str, Change]] = {}
    for change in (c for c in txn.changes if c.code != "T"):
        key = tuple(change.values[k] for k in seq.keys)
        if change.code == "B":
            after = updates[change.pair]
            if tuple(after.values[k] for k in seq.keys) == key:
                continue  # the update kept its key: nothing to do
            action = "delete"
        else:
            action = ACTIONS[change.code]
        position = positions[change.seq]
        if key not in best or position > best[key][0]:
            best[key] = (position, action, change)
    return {key: (action, change) for key, (_, action, change) in best.items()}


def _expected_append_only(seq: Sequence) -> Expected:
    rows: dict[int, tuple[Mapping[str, Any], str]] = {}
    applied, refused = _applied(seq)
    rejected: set[int] = set(refused)
    for index, txn in applied:
        _truncate(rows, txn)
        for change in txn.changes:
            if change.code in UPSERTS:
                rows[change.seq] = (seq.typed(seq.version(index), change.values), change.code)
            elif change.code in DELETES:
                rejected.add(change.seq)
    table = [(*(v.get(c) for c in seq.columns), code) for v, code in rows.values()]
    return Expected(normalized(table), frozenset(rejected), frozenset())


def landing(seq: Sequence, positions: Mapping[int, Position]) -> list[str]:
    """What breaks DESIGN's placement: a committed row missing, an explicit partition not
    kept, a key travelling two partitions by default (``positions``: as found on Kafka)."""
    problems, home = [], {}
    for index, txn in enumerate(seq.transactions):
        keys = seq.keys_of(seq.version(index))  # a changed key is another key
        for change in txn.changes:
            where = positions.get(change.seq)
            if where is None:
                missing = f"{seq.name}: SEQ {change.seq} is not on Kafka"
                problems += [missing] if txn.committed else []
            elif change.partition is not None and where[0] != change.partition:
                problems.append(f"{seq.name}: SEQ {change.seq} not on partition {change.partition}")
            elif change.partition is None and keys and change.code != "T":
                key = (keys, *(change.values[k] for k in keys))
                if home.setdefault(key, where[0]) != where[0]:
                    problems.append(
                        f"{seq.name}: key {key[1:]} travelled two partitions by default"
                    )
    return problems


def transaction(*rows: tuple[str, int, int, int]) -> Transaction:
    """A hand-written committed transaction of (code, K1, partition, SEQ) rows; NOTE is
    ``n<SEQ>``; B and U rows form one pair."""
    return Transaction(
        tuple(
            Change(
                code,
                {
                    "K1": k,
                    "REGION": None,
                    "GRP": 1,
                    "NOTE": f"n{n}",
                    "AMT": None,
                    "TS": None,
                    "SEQ": n,
                },
                p,
                pair=0 if code in ("B", "U") else None,
            )
            for code, k, p, n in rows
        )
    )


# -- strategies -------------------------------------------------------------------------------


def _image(keys: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    fields = {k: st.sampled_from(KEY_VALUES[k]) for k in keys or ("K1",)}
    fields.update(
        REGION=st.sampled_from(REGIONS),
        GRP=st.sampled_from(GROUPS),
        NOTE=st.sampled_from(NOTES),
        AMT=st.sampled_from(UNITS),
        TS=st.sampled_from(UNITS),
    )
    return st.fixed_dictionaries(fields)


def _partition(partitions: int) -> st.SearchStrategy[int | None]:
    return st.one_of(st.none(), st.none(), st.integers(0, partitions - 1))


def _scopes(keys: tuple[str, ...], scoped: bool) -> st.SearchStrategy[dict[str, Any] | None]:
    region, group = st.sampled_from(REGIONS), st.sampled_from(GROUPS)
    choices = [
        {"REGION": region},
        {"GRP": group},
        {"REGION": region, "GRP": group},
        {"K1": st.sampled_from(KEY_VALUES["K1"])},
    ]
    return st.one_of(st.none(), *map(st.fixed_dictionaries, choices)) if scoped else st.none()


@st.composite
def _step(
    draw: Any, keys: tuple[str, ...], partitions: int, scoped: bool, archives: bool = True
) -> list[Change]:
    """One change, or a BEFORE image with its UPDATE (keyed tables only)."""
    pairs = ["pair", "pair", "pair"] + ["P", "P"] * archives
    codes = [*UPSERTS, *DELETES, "T"] + (pairs if keys else [])
    code = draw(st.sampled_from(codes))
    if code == "T":
        return [Change("T", {}, draw(_partition(partitions)), scope=draw(_scopes(keys, scoped)))]
    if code != "pair":
        values = draw(_image(keys))
        if code == "X":  # only key fields are set (GRP cannot be null in Avro)
            values.update(REGION=None, GRP=0, NOTE=None, AMT=None, TS=None)
        return [Change(code, values, draw(_partition(partitions)))]
    before, after = draw(_image(keys)), draw(_image(keys))
    if draw(st.booleans()):  # paired by a shared row id, each on any partition
        return [
            Change("B", before, draw(_partition(partitions)), rowid="yes", pair=0),
            Change("U", after, draw(_partition(partitions)), rowid="yes", pair=0),
        ]
    partition = draw(st.integers(0, partitions - 1))  # no row id: adjacent in one partition
    return [Change("B", before, partition, pair=0), Change("U", after, partition, pair=0)]


@st.composite
def _transaction(
    draw: Any, keys: tuple[str, ...], partitions: int, scoped: bool, archives: bool = True
) -> Transaction:
    steps = draw(st.lists(_step(keys, partitions, scoped, archives), min_size=1, max_size=5))
    return Transaction(tuple(c for s in steps for c in s), committed=draw(st.integers(0, 6)) > 0)


@st.composite
def sequences(draw: Any, name: str = "S", scoped: bool = True) -> Sequence:
    """A random sequence (see the module docstring); SEQ, pairs and row ids numbered."""
    keys = draw(st.sampled_from([("K1",), ("K1",), ("K1", "K2"), ("K1", "K2"), ()]))
    partitions = draw(st.integers(2, 3))
    txns = draw(st.lists(_transaction(keys, partitions, scoped), min_size=1, max_size=5))
    first_run = draw(st.sampled_from([len(txns)] * 3 + list(range(1, len(txns)))))
    change = None
    if first_run < len(txns):  # a schema change between the writer's runs, now and then
        kinds = [k for k in CHANGES if k != "key-none" or keys]
        kinds = [k for k in kinds if k != "key-narrower" or len(keys) > 1]
        change = draw(st.sampled_from([None, None, *kinds]))
    history = bool(keys) and change is None and draw(st.integers(0, 3)) == 0
    return _numbered(
        Sequence(name, keys, partitions, tuple(txns), first_run, change, history=history)
    )


@st.composite
def late_sequences(draw: Any, name: str = "S", scoped: bool = True) -> Sequence:
    """A keyed sequence whose first transaction is a late producer's (:attr:`Sequence.late`).

    Its rows use the keys of the others, so they meet stored rows and tombstones newer than
    them; no ARCHIVE (see the module docstring), no schema change, one run after the others.
    """
    keys = draw(st.sampled_from([("K1",), ("K1", "K2")]))
    partitions = draw(st.integers(2, 3))
    late = replace(draw(_transaction(keys, partitions, scoped, archives=False)), committed=True)
    others = draw(
        st.lists(_transaction(keys, partitions, scoped, archives=False), min_size=1, max_size=4)
    )
    txns = (late, *others)
    return _numbered(Sequence(name, keys, partitions, txns, len(txns), None, late=True))


def generate(count: int, scoped: bool, generation_seed: int, late: bool = False) -> list[Sequence]:
    """``count`` hypothesis examples of :func:`sequences` (:func:`late_sequences` with
    ``late``), named S000, S001, ..."""
    found: list[Sequence] = []

    @seed(generation_seed)
    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(late_sequences(scoped=scoped) if late else sequences(scoped=scoped))
    def collect(seq: Sequence) -> None:
        found.append(seq)

    collect()
    return [replace(s, name=f"S{i:03d}") for i, s in enumerate(found[:count])]


def _numbered(seq: Sequence) -> Sequence:
    """Give every change a unique SEQ and every BEFORE/UPDATE pair its number (and row id)."""
    serial, pairs, txns = SEQ_BASE, 0, []
    for txn in seq.transactions:
        changes = []
        for change in txn.changes:
            numbered = replace(change, values={**change.values, "SEQ": serial})
            if change.code == "B":
                pairs += 1
            if change.pair is not None:
                rowid = f"row{pairs}" if change.rowid else None
                numbered = replace(numbered, pair=pairs, rowid=rowid)
            changes.append(numbered)
            serial += 1
        txns.append(replace(txn, changes=tuple(changes)))
    return replace(seq, transactions=tuple(txns))


# -- pinned sequences ----------------------------------------------------------------------


def _key(seq: Sequence, change: Change) -> tuple[Any, ...]:
    return tuple(change.values.get(k) for k in seq.keys)


def _change(
    code: str, k: int, region: str | None, seq: int, scope: Mapping[str, Any] | None = None
) -> Change:
    """A hand-written change on partition 0 with a REGION (what a scoped TRUNCATE looks at)."""
    return Change(
        code,
        {
            "K1": k,
            "REGION": region,
            "GRP": 1,
            "NOTE": f"n{seq}",
            "AMT": None,
            "TS": None,
            "SEQ": seq,
        },
        0,
        scope=scope,
    )


def _pinned(keys: tuple[str, ...], *rows: tuple[str, int, int, int]) -> Sequence:
    """One row per transaction, all applied by one writer run."""
    txns = tuple(transaction(row) for row in rows)
    return Sequence("S000", keys, 2, txns, first_run=len(txns))


FIXED_WRITER_BUGS: dict[str, Sequence] = {
    # an ARCHIVE after an upsert of its key in one micro-batch kept the ARCHIVE's image
    "archive-after-upsert-in-one-batch": _pinned(("K1",), ("R", 1, 0, 1000), ("P", 1, 0, 1001)),
    # ... and after a delete in one batch it archived the stored row instead of inserting
    "archive-after-delete-in-one-batch": _pinned(
        ("K1",), ("I", 1, 0, 1000), ("D", 1, 0, 1001), ("P", 1, 0, 1002)
    ),
    "archive-after-upsert-and-archive": _pinned(
        ("K1",), ("I", 1, 0, 1000), ("P", 1, 0, 1001), ("U", 1, 0, 1002), ("P", 1, 0, 1003)
    ),
    # the random test's counterpart: in one transaction the last row wins outright, so an
    # ARCHIVE after an upsert of its own transaction archives what was stored before it
    "archive-after-upsert-of-its-own-transaction": Sequence(
        "S000",
        ("K1",),
        2,
        (
            transaction(("I", 1, 0, 1000)),
            transaction(("A", 1, 0, 1001), ("P", 1, 0, 1002)),
            transaction(("T", 1, 0, 1003), ("A", 2, 0, 1004), ("P", 2, 0, 1005)),
        ),
        3,
    ),
    # on an append-only table a D before a TRUNCATE in one batch never reached _rejected
    "append-only-delete-before-a-truncate": _pinned((), ("D", 1, 0, 1000), ("T", 1, 0, 1001)),
    # an ARCHIVE after a delete stores its own image; a later ARCHIVE keeps that image, but
    # the writer folded the last ARCHIVE with the delete and stored the last one's image
    "archives-after-a-delete": _pinned(
        ("K1",), ("I", 1, 0, 1000), ("D", 1, 0, 1001), ("P", 1, 0, 1002), ("P", 1, 0, 1003)
    ),
    # ... likewise two ARCHIVEs of a key stored nowhere: the first one's image stays
    "archives-of-an-absent-key": _pinned(("K1",), ("P", 1, 0, 1000), ("P", 1, 0, 1001)),
    # an upsert that is not the last row of its transaction does not count: the ARCHIVE
    # after it archived the insert, and so does the next one
    "archive-after-an-upsert-its-transaction-archived": Sequence(
        "S000",
        ("K1",),
        2,
        (
            transaction(("I", 1, 0, 1000)),
            transaction(("U", 1, 0, 1001), ("P", 1, 0, 1002)),
            transaction(("P", 1, 0, 1003)),
        ),
        3,
    ),
    # an update older than a scoped TRUNCATE of its batch was dropped before the last row per
    # key was taken, so the insert it replaced came back (the TRUNCATE covers the update)
    "update-older-than-a-scoped-truncate": Sequence(
        "S000",
        ("K1",),
        2,
        (
            Transaction((_change("I", 1, "B", 1000),)),
            Transaction((_change("U", 1, "A", 1001),)),
            Transaction((_change("T", 0, None, 1002, scope={"REGION": "A"}),)),
        ),
        3,
    ),
    # an ARCHIVE keeps the stored payload, which a later scoped TRUNCATE of its batch covers;
    # the TRUNCATE deleted the stored row first and the ARCHIVE then inserted its own image
    "archive-before-a-scoped-truncate": Sequence(
        "S000",
        ("K1",),
        2,
        (
            Transaction((_change("I", 1, "A", 1000),)),
            Transaction((_change("P", 1, "B", 1001),)),
            Transaction((_change("T", 0, None, 1002, scope={"REGION": "A"}),)),
        ),
        1,
    ),
}
"""Minimal sequences of writer bugs found by the random test and fixed; each runs strictly,
all in one micro-batch (where the bugs showed)."""


def _changed(kind: str) -> Sequence:
    """Two rows, a writer run, then schema change ``kind``: an update and a third row."""
    keys = ("K1", "K2") if kind == "key-narrower" else ("K1",)

    def row(code: str, k: int, unit: int, seq: int) -> Change:
        values = {"K1": k, "K2": "a"} if "K2" in keys else {"K1": k}
        values |= {"REGION": "A", "GRP": 1, "NOTE": f"n{seq}", "AMT": unit, "TS": unit}
        return Change(code, {**values, "SEQ": seq}, 0)

    txns = (
        Transaction((row("I", 1, 1, 1000), row("I", 2, 2, 1001))),
        Transaction((row("U", 1, 2, 1002), row("I", 3, 0, 1003))),
    )
    return Sequence("S000", keys, 2, txns, first_run=1, change=kind)


SCHEMA_CHANGES: dict[str, Sequence] = {kind: _changed(kind) for kind in CHANGES}
"""One sequence per schema change between two writer runs; each runs strictly."""

CAPPED_BATCHES: dict[str, tuple[Sequence, int]] = {
    # a transaction split by the batch end: its D (p0, 2nd batch) deleted the I of p1 (1st
    # batch), though the last row by (partition, offset) is the I
    "transaction-split-across-batches": (
        Sequence(
            "S000",
            ("K1",),
            2,
            (transaction(("A", 2, 0, 1000), ("D", 1, 0, 1001), ("I", 1, 1, 1002)),),
            1,
        ),
        2,
    ),
    # a capped batch takes partitions in proportion: a later transaction's D on p0 (1st
    # batch) was applied before an earlier transaction's I of the key on p1 (3rd batch)
    "delete-overtaken-across-partitions": (
        Sequence(
            "S000",
            ("K1",),
            2,
            (
                transaction(("A", 2, 1, 1000), ("A", 3, 1, 1001), ("I", 1, 1, 1002)),
                transaction(("D", 1, 0, 1003)),
            ),
            2,
        ),
        3,
    ),
}
"""Writer bugs of capped micro-batches (``--max-offsets-per-trigger``), fixed by applying
transactions whole and in commit order (``lakehouse_writer.read.holdback``): (sequence,
micro-batches per writer run); each runs strictly."""


# -- rendering --------------------------------------------------------------------------------


def describe(seq: Sequence, positions: Mapping[int, Position] | None = None) -> str:
    """The sequence, one change a line, for failure messages."""
    keys = ",".join(seq.keys) or "none (append-only)"
    runs = (
        f"a writer run after transaction {seq.first_run} and one at the end"
        if seq.first_run < len(seq.transactions)
        else "one writer run at the end"
    )
    if seq.late:
        runs = "txn 1 by a second producer on a second topic, committed after a first writer run"
    changed = f"; schema change {seq.change} before the second run" if seq.change else ""
    changed += "; a history table (SCD2)" if seq.history else ""
    lines = [f"table {seq.name}: key {keys}, {seq.partitions} partitions, {runs}{changed}"]
    for number, txn in enumerate(seq.transactions, 1):
        late = " (late producer)" if seq.late and number == 1 else ""
        lines.append(f"  txn {number} {'committed' if txn.committed else 'ABORTED'}{late}:")
        for change in txn.changes:
            lines.append("    " + _describe_change(seq, change, (positions or {}).get(change.seq)))
    return "\n".join(lines)


def _describe_change(seq: Sequence, change: Change, position: Position | None) -> str:
    shown = seq.columns if change.code != "T" else ("SEQ",)
    text = f"{change.code} " + " ".join(f"{c}={change.values.get(c)!r}" for c in shown)
    if change.code == "T":
        text += f" scope={dict(change.scope) if change.scope else 'whole table'}"
    if change.pair is not None:
        text += f" pair={change.pair} rowid={change.rowid}"
    where = "default" if change.partition is None else change.partition
    landed = f" -> p{position[0]}@{position[1]}" if position else ""
    return f"{text} partition={where}{landed}"
