"""Governance metadata of a table: owner, links, retention, deletion policy, classifications.

Mixed into :class:`~producer_lib.schema.value_schema.ValueSchema`; the values travel as
record-level (and, for column classifications, field-level) properties of the schema JSON.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from producer_lib.errors import SchemaError

CLASSIFICATION = "dataClassification"
GOVERNANCE_PROPERTIES = (
    "dataProductOwnerEmail",
    "repoUrl",
    "sourceSystemUri",
    "ticketsUrl",
    "retentionPeriod",
    "deletionPolicy",
    CLASSIFICATION,
)
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s.]+")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S+")
_ISO_DURATION = re.compile(r"P(?!$)(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+S)?)?")


class GovernanceMixin:
    """Setters and validation of governance properties (needs ``name`` and ``field()``)."""

    name: str
    _governance: dict[str, str]
    _classifications: dict[str, str]

    if TYPE_CHECKING:

        def field(self, name: str) -> Any:  # noqa: D102 - provided by ValueSchema
            ...

    # -- governance -----------------------------------------------------------------------

    @property
    def governance(self) -> Mapping[str, str]:
        """Governance properties set so far, by schema property name."""
        return MappingProxyType(self._governance)

    def set_data_product_owner_email(self, email: str) -> None:
        """Set the e-mail address of the data product owner (``dataProductOwnerEmail``)."""
        self._check(_EMAIL.fullmatch(email or ""), "Not an e-mail address", email=email)
        self._governance["dataProductOwnerEmail"] = email

    def set_repo_url(self, url: str) -> None:
        """Set the URL of the flow's source repository (``repoUrl``)."""
        self._governance["repoUrl"] = self._http_url(url)

    def set_tickets_url(self, url: str) -> None:
        """Set the URL where issues about this data are reported (``ticketsUrl``)."""
        self._governance["ticketsUrl"] = self._http_url(url)

    def set_source_system_uri(self, uri: str) -> None:
        """Set the URI of the source system, e.g. ``jdbc:oracle:thin:@db:1521/LIMS``."""
        self._check(_URI.fullmatch(uri or ""), "Not a URI (scheme:rest)", uri=uri)
        self._governance["sourceSystemUri"] = uri

    def set_retention_period(self, period: int | timedelta | str) -> None:
        """Set how long data is kept: days, a whole-day timedelta, or an ISO 8601 duration."""
        if isinstance(period, timedelta):
            self._check(
                period.days > 0 and period == timedelta(days=period.days),
                "Retention must be a positive number of whole days",
                period=period,
            )
            period = period.days
        if isinstance(period, int) and not isinstance(period, bool):
            self._check(period > 0, "Retention must be positive", period=period)
            period = f"P{period}D"
        ok = isinstance(period, str) and _ISO_DURATION.fullmatch(period)
        self._check(ok, "Not an ISO 8601 duration (e.g. P30D, P1Y)", period=period)
        self._governance["retentionPeriod"] = str(period)

    def set_deletion_policy(self, policy: str) -> None:
        """Set the deletion policy, free text such as ``delete-after-retention``."""
        self._check(isinstance(policy, str) and policy.strip(), "Empty deletion policy")
        self._governance["deletionPolicy"] = policy

    def set_data_classification(self, column: str | None, classification: str) -> None:
        """Classify a column, or with ``column=None`` the whole table (``dataClassification``)."""
        self._check(
            isinstance(classification, str) and classification.strip(),
            "Empty data classification",
            column=column,
        )
        if column is None:
            self._governance[CLASSIFICATION] = classification
        else:
            self.field(column)
            self._classifications[column] = classification

    @property
    def column_classifications(self) -> Mapping[str, str]:
        """Data classifications by column (original name)."""
        return MappingProxyType(self._classifications)

    def _check(self, ok: object, message: str, **context: Any) -> None:
        if not ok:
            raise SchemaError(message, table=self.name, **context)

    def _http_url(self, url: str) -> str:
        parsed = urlparse(url or "")
        ok = parsed.scheme in ("http", "https") and bool(parsed.netloc)
        self._check(ok, "Not an http(s) URL", url=url)
        return url
