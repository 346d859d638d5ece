"""The row types of DESIGN ("Row types"), as the rules read them.

One character in ``__change_type``: I, U, A, R upsert; D, X, G delete by key (G also leaves no
current data file holding the row); B is an UPDATE's before-image, acted on only when the
UPDATE moved the key; P archives (keeps the stored payload, marks it ``P``); T truncates the
rows of its scope older than it.
"""

from __future__ import annotations

__all__ = [
    "ACTION",
    "ACTION_DELETE",
    "ARCHIVE",
    "BASE_TIME",
    "BEFORE",
    "DELETES",
    "GDPR",
    "KNOWN",
    "OUTLIVED_UPDATE",
    "TRUNCATE",
    "UPDATE",
    "UPSERTS",
]

UPSERTS = ("I", "U", "A", "R")
DELETES = ("D", "X", "G")
UPDATE, BEFORE, ARCHIVE, TRUNCATE, GDPR = "U", "B", "P", "T", "G"
# An UPDATE a tombstone outlived (rules.tombstones.outlived): it writes nothing, but it still
# pairs with its BEFORE image, whose key it moved. Never sent; the rules mark it so.
OUTLIVED_UPDATE = "u"
KNOWN = (*UPSERTS, *DELETES, BEFORE, ARCHIVE, TRUNCATE)

ACTION = "__action"  # what a MERGE source row does: upsert, delete, archive, or a fold
ACTION_DELETE = "delete"  # the ACTION of a row that deletes its key (it leaves a tombstone)
BASE_TIME = "__base_time"  # the change time of the upsert or delete an archive is folded with
