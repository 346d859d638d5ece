"""The ``_lineage`` records of one commit: a document per table whose SQL the reader knows."""

from __future__ import annotations

import json
import logging
from typing import Any

from producer_lib.kafka.producer import PendingCommit
from producer_lib.runner.lineage import LineageError, derive_lineage
from producer_lib.sources import SourceAdapter

__all__ = ["lineage_documents", "lineage_record"]


def lineage_documents(
    reader: SourceAdapter | None, pending: PendingCommit, logger: logging.Logger
) -> list[dict[str, Any]]:
    """The ``_lineage`` documents (docs/WIRE.md) of the tables in ``pending``.

    A table gets a document when ``reader.load`` produced it from SQL (``reader.loads``).
    Lineage is best effort: SQL it cannot follow is logged as a warning and skipped, never
    failing the commit.
    """
    documents = []
    for table in pending.rows:
        load = reader.loads.get(table) if reader is not None else None
        if load is None or load.dialect is None:
            continue
        try:
            lineage = derive_lineage(
                load.sql,
                table,
                schema=load.source_schema or None,
                output_columns=load.columns,
                dialect=load.dialect,
            )
        except LineageError as exc:
            logger.warning("no lineage table=%s error=%s", table, exc)
            continue
        documents.append(lineage.to_json(pending.commit_id))
    return documents


def lineage_record(document: dict[str, Any]) -> tuple[bytes, bytes]:
    """Key (the target table) and value bytes of one ``_lineage`` document."""
    return document["target"].encode(), json.dumps(document, separators=(",", ":")).encode()
