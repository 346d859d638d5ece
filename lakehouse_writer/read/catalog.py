"""Resolve writer schemas: by fingerprint from ``_flow_schemas``, by id from a Schema Registry.

The catalog topic ``_flow_schemas`` (compacted, 1 partition; layout in ``docs/WIRE.md``) is
read on the driver with a plain consumer from the start to its end, and again only when a
batch shows a fingerprint the cache does not know. A fingerprint it does not hold is then
looked up in the catalog's old topic, ``_schemas``, where producers wrote before the rename:
records of ours found there still resolve, and the records of a Schema Registry (whose own
store ``_schemas`` is) are skipped. Registry ids are fetched once each.

Key schemas (:meth:`SchemaCatalog.key_schemas`) are the ``"kind": "key"`` records of a topic in
the catalog topics, and with a registry every version of the subject ``<topic>-key``.

The registry is reached with the producer's own settings (``SCHEMA_REGISTRY_*``: basic auth or
a bearer token, a TLS CA, a client certificate) through one client (:class:`RegistryLookups`).
An id the registry does not know is an unknown schema (its rows go to ``_rejected``); any other
answer — refused credentials, no answer — fails the batch, which a restart reads again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Message

from lakehouse_writer.errors import DecodeError, LakehouseWriterError
from lakehouse_writer.read.keys import KeySchemaRef
from producer_lib.errors import SchemaError
from producer_lib.kafka.topic_reader import TopicReadError, consumer, ranges_to_end, read_ranges
from producer_lib.schema.catalog_records import is_registry_key, parse_record
from producer_lib.schema.framing import confluent_header, single_object_header
from producer_lib.settings import SchemaRegistrySettings

log = logging.getLogger(__name__)

_READ_STALL_S = 30.0  # a catalog read that moves no offset for this long fails
SCHEMAS_TOPIC = "_flow_schemas"
LEGACY_SCHEMAS_TOPIC = "_schemas"  # the catalog's old name; Confluent Schema Registry's store


class RegistryUnavailable(LakehouseWriterError):
    """The schema registry refused the writer's credentials or did not answer.

    Names the registry and the settings that log in, never their values. Rows are not
    rejected for it: the batch fails, and a restart reads them again.
    """


class RegistryLookups:
    """One ``SchemaRegistryClient`` for the writer's lookups, with the producer's settings.

    Args:
        settings: ``SCHEMA_REGISTRY_*`` (URL, basic auth or bearer token, TLS).
    """

    def __init__(self, settings: SchemaRegistrySettings) -> None:
        self._settings = settings
        self._client: Any = None

    @property
    def url(self) -> str:
        """The registry's URL."""
        return self._settings.url or ""

    def check(self) -> None:
        """Ask the registry once (its subjects): credentials and TLS work, or it says why.

        Raises:
            RegistryUnavailable: The registry refused the login or could not be reached.
        """
        self._call("a first request", lambda client: client.get_subjects())

    def schema(self, schema_id: int) -> CatalogEntry | None:
        """The schema of ``schema_id``; None when the registry does not know the id.

        Raises:
            RegistryUnavailable: Another answer than "not found" (refused, unreachable).
        """
        found = self._call(f"schema id {schema_id}", lambda c: c.get_schema(schema_id))
        return None if found is None else CatalogEntry(found.schema_str)

    def versions(self, subject: str) -> list[tuple[int, str]]:
        """(id, schema JSON) of every version of ``subject``; [] when there is none.

        Raises:
            RegistryUnavailable: Another answer than "not found" (refused, unreachable).
        """
        numbers = self._call(f"subject {subject}", lambda c: c.get_versions(subject)) or []
        found = []
        for number in numbers:
            registered = self._call(subject, _version_of(subject, number))
            if registered is not None:
                found.append((registered.schema_id, registered.schema.schema_str))
        return found

    def _call(self, what: str, call: Callable[[Any], Any]) -> Any:
        """``call(client)``; None for a 404; :class:`RegistryUnavailable` for other errors."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return call(self._open())
        except SchemaRegistryError as exc:
            if exc.http_status_code == _NOT_FOUND:
                return None
            reason = f"HTTP {exc.http_status_code}: {exc.error_message}"
            raise self._unavailable(what, reason) from exc
        except Exception as exc:  # noqa: BLE001 - TLS, DNS, refused connections, timeouts
            raise self._unavailable(what, f"{type(exc).__name__}: {exc}") from exc

    def _open(self) -> Any:
        if self._client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            self._client = SchemaRegistryClient(self._settings.to_client_config())
        return self._client

    def _unavailable(self, what: str, reason: str) -> RegistryUnavailable:
        for secret in _secret_values(self._settings):
            reason = reason.replace(secret, "***")
        return RegistryUnavailable(
            f"the schema registry refused or did not answer {what} ({reason}); check the "
            f"registry's URL and the settings that log in: {self._settings.login}, and "
            "SCHEMA_REGISTRY_SSL_CA_LOCATION for its TLS certificate",
            registry=self.url,
        )


_NOT_FOUND = 404


def _version_of(subject: str, number: int) -> Callable[[Any], Any]:
    return lambda client: client.get_version(subject, number)


def _secret_values(settings: SchemaRegistrySettings) -> list[str]:
    values = [settings.basic_auth_password, settings.bearer_auth_token, settings.ssl_key_password]
    return [v.get_secret_value() for v in values if v is not None and v.get_secret_value()]


@dataclass(frozen=True)
class CatalogEntry:
    """A writer schema: its Avro JSON text and, from the catalog topic, what it is for."""

    schema_json: str
    kind: str | None = None
    topic: str | None = None


class SchemaCatalog:
    """Schemas by single-object fingerprint (hex) and by Confluent registry id.

    Args:
        kafka_conf: librdkafka settings (``bootstrap.servers``, security ...).
        schemas_topic: The catalog topic, ``_flow_schemas`` by default.
        registry: The Schema Registry's settings, or None when only single-object framing
            is used (or no ``SCHEMA_REGISTRY_URL`` is set).
        legacy_topic: The catalog's old topic, read for fingerprints the catalog topic does
            not hold (``_schemas``; None: none).
    """

    def __init__(
        self,
        kafka_conf: dict[str, str],
        schemas_topic: str = SCHEMAS_TOPIC,
        registry: SchemaRegistrySettings | None = None,
        legacy_topic: str | None = LEGACY_SCHEMAS_TOPIC,
    ) -> None:
        self._kafka_conf = kafka_conf
        self._topic = schemas_topic
        self._legacy = legacy_topic if legacy_topic and legacy_topic != schemas_topic else None
        configured = registry is not None and registry.configured
        self.registry = RegistryLookups(registry) if registry is not None and configured else None
        self._by_fingerprint: dict[str, CatalogEntry] = {}
        self._legacy_entries: dict[str, CatalogEntry] = {}
        self._by_id: dict[int, CatalogEntry] = {}
        self._next_offset: dict[str, int] = {}
        self._registry_records: dict[str, int] = {}  # topic -> registry records skipped
        self._registry_keys: dict[str, list[KeySchemaRef]] = {}  # topic -> its key versions
        self._keys_by_topic: dict[str, list[KeySchemaRef]] | None = None  # of the topics read

    def by_fingerprint(self, fingerprints: set[str]) -> dict[str, CatalogEntry]:
        """Entries of the given fingerprints (hex); unknown ones are absent from the result."""
        if not fingerprints <= self._known():
            self.refresh()
        if self._legacy is not None and not fingerprints <= self._known():
            self._refresh_topic(self._legacy, self._legacy_entries)
        found = {fp: self._legacy_entries[fp] for fp in fingerprints if fp in self._legacy_entries}
        found.update(
            {fp: self._by_fingerprint[fp] for fp in fingerprints if fp in self._by_fingerprint}
        )
        return found

    def _known(self) -> set[str]:
        return self._by_fingerprint.keys() | self._legacy_entries.keys()

    def by_id(self, ids: set[int]) -> dict[int, CatalogEntry]:
        """Entries of the given registry ids; unknown (or no registry) ones are absent.

        Raises:
            RegistryUnavailable: The registry refused the writer or did not answer.
        """
        for schema_id in ids - self._by_id.keys():
            entry = self._fetch_registry(schema_id)
            if entry is not None:
                self._by_id[schema_id] = entry
                self._registry_keys.clear()  # a new value schema may come with a new key
        return {i: self._by_id[i] for i in ids if i in self._by_id}

    def key_schemas(self, topics: Iterable[str | None]) -> list[KeySchemaRef]:
        """The key writer schemas of ``topics`` the catalog holds (no read of the topics).

        The ``"kind": "key"`` records of each topic in the catalog topic and its old one, as
        last read (a value schema's key is registered before it, so a batch whose value
        schemas are known finds their keys), and with a registry every version of the
        subject ``<topic>-key`` (fetched once per topic). A registry's value schema names no
        topic: the caller gives the topics its rows came from.

        Raises:
            RegistryUnavailable: The registry refused the writer or did not answer.
        """
        if self._keys_by_topic is None:
            self._keys_by_topic = self._index_keys()
        found: dict[bytes, KeySchemaRef] = {}
        for topic in sorted(t for t in set(topics) if t):
            for ref in self._keys_by_topic.get(topic, []) + self._registry_key_schemas(topic):
                found.setdefault(bytes(ref.header), ref)
        return list(found.values())

    def _index_keys(self) -> dict[str, list[KeySchemaRef]]:
        """The key records of both catalog topics by the topic they are for."""
        index: dict[str, list[KeySchemaRef]] = {}
        for entries in (self._by_fingerprint, self._legacy_entries):
            for fingerprint, entry in entries.items():
                if entry.kind != "key" or not entry.topic:
                    continue
                try:
                    header = single_object_header(bytes.fromhex(fingerprint))
                except (ValueError, SchemaError):
                    continue  # a bad record: keys framed with it are unknown (rejected)
                index.setdefault(entry.topic, []).append(KeySchemaRef(header, entry.schema_json))
        return index

    def _registry_key_schemas(self, topic: str) -> list[KeySchemaRef]:
        if self.registry is None:
            return []
        if topic not in self._registry_keys:
            self._registry_keys[topic] = [
                KeySchemaRef(confluent_header(schema_id), schema_json)
                for schema_id, schema_json in self.registry.versions(f"{topic}-key")
            ]
        return self._registry_keys[topic]

    def latest_value_schemas(self) -> list[tuple[str, CatalogEntry]]:
        """(fingerprint, entry) of each topic's latest value schema in the catalog topic.

        The topic whose schema was registered last comes first. Read once, then from memory:
        what a cold start expects its first batch to hold. The old topic is not consulted.
        """
        if self._topic not in self._next_offset:
            self.refresh()
        latest: dict[str | None, tuple[str, CatalogEntry]] = {}
        for fingerprint, entry in self._by_fingerprint.items():  # in the order registered
            if entry.kind == "value" and entry.topic:
                latest.pop(entry.topic, None)
                latest[entry.topic] = (fingerprint, entry)
        return list(reversed(latest.values()))

    def value_schema_counts(self) -> dict[str, int]:
        """How many value schemas the catalog topic holds per topic (as last read; no read)."""
        counts: dict[str, int] = {}
        for entry in self._by_fingerprint.values():
            if entry.kind == "value" and entry.topic:
                counts[entry.topic] = counts.get(entry.topic, 0) + 1
        return counts

    def refresh(self) -> None:
        """Read the catalog topic from where the last refresh stopped to its current end."""
        self._refresh_topic(self._topic, self._by_fingerprint)

    def _refresh_topic(self, topic: str, into: dict[str, CatalogEntry]) -> None:
        try:
            with consumer(self._kafka_conf, purpose="lakehouse-writer-catalog") as client:
                self._read(client, topic, into)
        except TopicReadError as exc:
            raise DecodeError(f"cannot read the schema catalog: {exc}", topic=topic) from exc
        log.info("schema catalog refreshed topic=%s schemas=%d", topic, len(into))
        if self._registry_records.get(topic):
            log.info(
                "schema catalog topic holds Schema Registry records; skipped topic=%s records=%d",
                topic,
                self._registry_records[topic],
            )

    def _read(self, client: Consumer, topic: str, into: dict[str, CatalogEntry]) -> None:
        """Read ``topic``'s partition 0 from where the last read stopped to its end."""
        start = self._next_offset.get(topic)
        starts = None if start is None else {0: start}
        ranges = ranges_to_end(client, topic, timeout_s=10, starts=starts, partitions=[0])
        if ranges is None:
            if topic == self._topic:
                log.warning("schema catalog topic missing topic=%s", topic)
            self._next_offset.setdefault(topic, 0)
            return
        for messages in read_ranges(client, ranges, stall_s=_READ_STALL_S):
            for msg in messages:
                self._add(msg, into)
        self._next_offset[topic] = ranges[(topic, 0)][1]

    def _add(self, msg: Message, into: dict[str, CatalogEntry]) -> None:
        topic = msg.topic() or ""
        if is_registry_key(msg.key()):
            self._registry_records[topic] = self._registry_records.get(topic, 0) + 1
            return
        try:
            record = parse_record(msg.value())
        except ValueError as exc:
            log.warning(
                "bad schema catalog record topic=%s offset=%d error=%s", topic, msg.offset(), exc
            )
            return
        into.pop(record.fingerprint, None)  # keep the order of the latest records
        self._keys_by_topic = None  # indexed again when next asked
        into[record.fingerprint] = CatalogEntry(record.schema_json, record.kind, record.topic)

    def _fetch_registry(self, schema_id: int) -> CatalogEntry | None:
        return None if self.registry is None else self.registry.schema(schema_id)
