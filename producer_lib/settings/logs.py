"""How the platform's commands log: :class:`LogSettings` (``LOG_FORMAT``, ``LOG_LEVEL``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from producer_lib.settings.base import EnvSettings

__all__ = ["LogSettings"]

LogFormat = Literal["text", "json"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


class LogSettings(EnvSettings):
    """The log lines of ``producer-lib``, ``lakehouse-writer``, ``devstack`` and a flow app.

    Attributes:
        format: ``text`` (one ``time level logger message`` line) or ``json`` (one JSON
            object a line, for a log shipper; ``LOG_FORMAT``).
        level: The least level logged (``LOG_LEVEL``): DEBUG, INFO, WARNING, ERROR or
            CRITICAL; unset: each command's own (INFO; WARNING for the writer's status,
            resume-table and maintain).
    """

    _what: ClassVar[str] = "log settings"

    format: LogFormat = Field(default="text", validation_alias="LOG_FORMAT")
    level: LogLevel | None = Field(default=None, validation_alias="LOG_LEVEL")

    @field_validator("format", mode="before")
    @classmethod
    def _format_any_case(cls, value: object) -> object:
        """``JSON`` and `` json `` are read as ``json``; an empty value as ``text``."""
        return (value.strip().lower() or "text") if isinstance(value, str) else value

    @field_validator("level", mode="before")
    @classmethod
    def _level_any_case(cls, value: object) -> object:
        """``info`` is read as ``INFO``; an empty value as not set."""
        return (value.strip().upper() or None) if isinstance(value, str) else value
