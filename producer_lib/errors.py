"""Errors raised by producer_lib.

One tree: every error a flow author can see derives from :class:`ProducerLibError`.
An error keeps its context (flow, table, column, topic, ...) as attributes and builds
its message from them, so logs say what went wrong, where, and what to do next.
:class:`Transient` marks errors that a retry of the same call can fix.
"""

from __future__ import annotations

from typing import Any


class ContextError(Exception):
    """An error that carries where it happened and renders it into its message.

    The common base of producer_lib's and lakehouse_writer's error trees.

    Args:
        message: What went wrong and, where it helps, what to do next.
        **context: Where it went wrong (``flow=``, ``table=``, ``column=``, ``topic=``...).
            Kept as attributes and appended to the message as ``key=value`` pairs.
    """

    def __init__(self, message: str, **context: Any) -> None:
        self.message = message
        self.context = {k: v for k, v in context.items() if v is not None}
        for key, value in self.context.items():
            setattr(self, key, value)
        super().__init__(self._render())

    def _render(self) -> str:
        if not self.context:
            return self.message
        where = " ".join(f"{k}={v!r}" for k, v in self.context.items())
        return f"{self.message} [{where}]"


class ProducerLibError(ContextError):
    """Base of every error raised by producer_lib."""


class Transient:
    """Mixin: the operation may succeed if retried unchanged."""


class SchemaError(ProducerLibError):
    """A schema is invalid, or a value does not fit its schema."""


class EncodeError(SchemaError):
    """A value could not be encoded with its Avro schema (type, range, length, null)."""


class SourceError(ProducerLibError):
    """Reading from a source system failed, or its data breaks a declared rule."""


class ExpectationFailed(SourceError):
    """Rows failed an expectation whose action is ``fail``: nothing of the export was produced."""


class ProduceError(ProducerLibError):
    """Producing to Kafka failed; the open transaction is aborted."""


class ConfigError(ProducerLibError):
    """Settings are missing or contradict each other."""


class KafkaUnavailable(Transient, ProduceError):
    """The Kafka cluster could not be reached in time; retrying later may work."""


class AuthError(ProducerLibError):
    """A caller of an HTTP route could not be authenticated (:mod:`producer_lib.auth`)."""


class Unauthorized(AuthError):
    """The request carries no credential, or one that is not valid here (HTTP 401).

    ``reason`` is a fixed phrase for the server's log (``token expired``, ``unknown key``);
    it never quotes the credential. The HTTP answer does not show it: a caller learns only
    that it was refused.
    """

    def __init__(self, reason: str) -> None:
        super().__init__("unauthorized", reason=reason)
        self.reason = reason


class AuthUnavailable(Transient, AuthError):
    """A token cannot be checked now: the tenant's signing keys could not be fetched (503)."""
