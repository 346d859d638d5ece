"""Errors raised by the lakehouse writer.

One tree: :class:`LakehouseWriterError` → :class:`DecodeError` (bytes that are no change row),
:class:`ApplyError` (a row that cannot be applied to its table), :class:`TableError` (what
one table cannot take: that table stops, the others go on) → :class:`SchemaEvolutionError` (a
schema change the Delta table cannot take) and :class:`TableNameError` (a name the lakehouse
cannot hold), :class:`TopicPatternError` (a topics regex Java
refuses), :class:`KafkaUnreachable` (no cluster within the connect timeout),
:class:`KafkaRefused` (the cluster refused the writer: authentication, TLS, protocol; not
transient) and
:class:`WriterFailed` (a run ended by an error; its message is the root cause). An error
keeps its context (``table=``, ``topic=``, ``partition=``, ``offset=`` ...) as attributes
and renders it into its message.
"""

from __future__ import annotations

from producer_lib.errors import ContextError, Transient

__all__ = [
    "ApplyError",
    "CheckpointInUse",
    "CheckpointMismatch",
    "DecodeError",
    "KafkaRefused",
    "KafkaUnreachable",
    "LakehouseWriterError",
    "SchemaEvolutionError",
    "TableError",
    "TableNameError",
    "TopicPatternError",
    "Transient",
    "WriterFailed",
]


class LakehouseWriterError(ContextError):
    """Base of every error raised by the lakehouse writer.

    Args:
        message: What went wrong and, where it helps, what to do next.
        **context: Where it went wrong; kept as attributes, appended as ``key=value``.
    """


class DecodeError(LakehouseWriterError):
    """A message cannot be decoded: no header, unknown schema, bad Avro, not a value schema."""


class ApplyError(LakehouseWriterError):
    """A decoded row cannot be applied to its table (e.g. a delete on an append-only table)."""


class TableError(LakehouseWriterError):
    """What one table cannot take; that table is stopped, the other tables go on.

    A stopped table stays stopped across restarts until ``lakehouse-writer resume-table``.
    """


class SchemaEvolutionError(TableError):
    """A table's new schema is incompatible with the Delta table; that table is stopped."""


class TableNameError(TableError):
    """The lakehouse cannot hold a table of this name; that table is stopped.

    A reserved namespace, a dot in the table name, or a name too long for a path segment
    (:func:`producer_lib.schema.names.table_name_problem`); the producer refuses such names,
    so rows reach the writer only from an older producer or another one.
    """


class TopicPatternError(LakehouseWriterError):
    """The topics regex is not a valid Java regex (the engine Kafka subscribes with)."""


class KafkaUnreachable(Transient, LakehouseWriterError):
    """The Kafka cluster did not answer within the connect timeout; a later start may work."""


class KafkaRefused(LakehouseWriterError):
    """The Kafka cluster answered but refused the writer: authentication, TLS or protocol.

    Not transient: a start with the same settings fails the same way.
    """


class WriterFailed(LakehouseWriterError):
    """A run of the writer failed; the message is the root cause (``Class: message``).

    The status file says ``failed`` with the same cause by the time this is raised.
    """


class CheckpointMismatch(LakehouseWriterError):
    """The checkpoint and the lakehouse do not belong together; nothing was read or written.

    The lakehouse holds progress of another writer instance on topics this one reads, or the
    checkpoint has applied batches to a lakehouse that holds none of them.
    """


class CheckpointInUse(CheckpointMismatch):
    """Another writer started with the same new checkpoint at the same moment, and won."""
