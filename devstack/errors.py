"""Errors of the local development stack."""

from __future__ import annotations


class DevstackError(Exception):
    """The local stack could not be set up, started or stopped; the message says what to do."""
