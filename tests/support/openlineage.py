"""OpenLineage test aids: a spec check of run events, and an HTTP receiver to send them to.

No JSON schema of the OpenLineage spec ships in a PyPI package this repository can install:
openlineage-python 1.54.0 has the generated classes only, and openlineage-integration-common
1.54.0 ships the schemas of its integrations' own facets, not ``OpenLineage.json``. So
:func:`check_run_event` checks by hand what the spec's ``OpenLineage.json`` (2-0-2, the
``schemaURL`` the client writes) and the facet schemas the events use require: every required
field, its JSON type, the formats that matter (uuid, date-time, uri), the event type enum,
and ``_producer``/``_schemaURL`` on every facet.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

EVENT_TYPES = {"START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"}
SCHEMA_URL = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
# Required fields of the facets the flows send (each facet's own schema).
FACET_REQUIRED = {
    "processing_engine": {"version": str},
    "tags": {},
    "errorMessage": {"message": str, "programmingLanguage": str},
    "jobType": {"processingType": str, "integration": str},
    "schema": {},
    "columnLineage": {"fields": dict},
    "outputStatistics": {},
}


def _uri(value: Any, where: str) -> None:
    assert isinstance(value, str) and value, f"{where}: a non-empty string"
    parts = urlsplit(value)
    assert parts.scheme and (parts.netloc or parts.path), f"{where}: not a URI: {value!r}"


def _facets(facets: Any, where: str) -> None:
    assert isinstance(facets, dict), f"{where}: facets must be an object"
    for name, facet in facets.items():
        at = f"{where}.{name}"
        assert isinstance(facet, dict), f"{at}: a facet is an object"
        _uri(facet.get("_producer"), f"{at}._producer")
        _uri(facet.get("_schemaURL"), f"{at}._schemaURL")
        for field, kind in FACET_REQUIRED.get(name, {}).items():
            assert isinstance(facet.get(field), kind), f"{at}.{field}: required {kind.__name__}"
    if "tags" in facets:
        for tag in facets["tags"]["tags"]:
            assert isinstance(tag["key"], str) and isinstance(tag["value"], str), where
    if "schema" in facets:
        for field in facets["schema"]["fields"]:
            assert isinstance(field["name"], str), f"{where}.schema: a field needs a name"
    if "outputStatistics" in facets:
        rows = facets["outputStatistics"].get("rowCount")
        assert rows is None or (isinstance(rows, int) and rows >= 0), where
    if "columnLineage" in facets:
        for column, mapping in facets["columnLineage"]["fields"].items():
            assert isinstance(mapping.get("inputFields"), list), f"{where}.{column}: inputFields"
            for source in mapping["inputFields"]:
                for key in ("namespace", "name", "field"):
                    assert isinstance(source.get(key), str) and source[key], (where, column, key)
                for transformation in source.get("transformations", []):
                    assert transformation.get("type") in {"DIRECT", "INDIRECT"}, (where, column)


def _dataset(dataset: Any, where: str, own_facets: str) -> None:
    assert isinstance(dataset, dict), f"{where}: a dataset is an object"
    for key in ("namespace", "name"):
        assert isinstance(dataset.get(key), str) and dataset[key], f"{where}.{key}: required"
    _facets(dataset.get("facets", {}), f"{where}.facets")
    _facets(dataset.get(own_facets, {}), f"{where}.{own_facets}")


def check_run_event(event: dict[str, Any]) -> None:
    """Assert ``event`` (parsed JSON) is a RunEvent as the OpenLineage spec requires."""
    assert event.get("eventType") in EVENT_TYPES, f"eventType: {event.get('eventType')!r}"
    time = event.get("eventTime")
    assert isinstance(time, str) and datetime.fromisoformat(time).tzinfo, f"eventTime: {time!r}"
    _uri(event.get("producer"), "producer")
    assert event.get("schemaURL") == SCHEMA_URL, event.get("schemaURL")
    run, job = event.get("run"), event.get("job")
    assert isinstance(run, dict) and isinstance(job, dict), "run and job are required objects"
    assert str(uuid.UUID(run["runId"])) == run["runId"].lower(), "runId: a UUID"
    _facets(run.get("facets", {}), "run.facets")
    for key in ("namespace", "name"):
        assert isinstance(job.get(key), str) and job[key], f"job.{key}: required"
    _facets(job.get("facets", {}), "job.facets")
    for i, dataset in enumerate(event.get("inputs", [])):
        _dataset(dataset, f"inputs[{i}]", "inputFacets")
    for i, dataset in enumerate(event.get("outputs", [])):
        _dataset(dataset, f"outputs[{i}]", "outputFacets")


class LineageReceiver:
    """An HTTP server on loopback taking OpenLineage events as the HTTP transport posts them.

    Attributes:
        url: Its base URL (the transport posts to ``<url>/api/v1/lineage``).
        events: The parsed bodies, in the order they arrived.
        paths: The request paths, likewise.
    """

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.paths.append(self.path)
                receiver.events.append(json.loads(body))
                self.send_response(201)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def of_run(self, run_id: str) -> list[dict[str, Any]]:
        """The events of one run, in the order they arrived."""
        return [e for e in self.events if e["run"]["runId"] == run_id]

    @contextmanager
    def running(self) -> Iterator[LineageReceiver]:
        """Serve while inside the block."""
        self._thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()


def closed_port_url() -> str:
    """A loopback URL nothing listens on (a port just bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
