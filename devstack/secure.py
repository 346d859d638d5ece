"""A second, secured devstack broker: SASL_SSL with SCRAM-SHA-512 users and ACLs.

It runs beside the plaintext broker (its own ports, default 19094/19095, and its own folder,
``<devstack home>/kafka-secure``) and is what production Kafka looks like to a client:

- one client listener, ``SASL_SSL`` (TLS with a dev CA made at the first start by
  :mod:`devstack.tls`; SCRAM-SHA-512 logins), also used between the broker and itself
  (transaction markers); the controller listener takes ``SASL_PLAINTEXT``/PLAIN on loopback;
- the ``StandardAuthorizer``, denying what no ACL allows; ``admin`` is the only super user;
- ``writer``: reads and describes every topic, commits offsets of its own groups
  (``lakehouse-writer*``, ``spark-kafka-source-*``), writes nothing;
- one user per flow, ``flow-<function>`` (:class:`FlowGrant`): writes, creates and reads its
  own topics (a name prefix) and the system topics, reads ``_schemas``, uses only its
  transactional ids (``<environment>.<zone>.<function>.``) and its reader groups.

Passwords are generated at the first start and kept in ``credentials.json`` (owner-only) in
the broker's folder. They are dev passwords for this local broker only.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack import broker, jars, paths, process, tls, tools
from devstack.errors import DevstackError

log = logging.getLogger(__name__)

DEFAULT_PORT = 19094  # beside the plaintext broker's 19092/19093
ADMIN, WRITER = "admin", "writer"
MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 4096  # Kafka's minimum for SHA-512; a dev broker need not pay more
SYSTEM_TOPICS = ("_commits", "_execution_log", "_lineage", "_flow_schemas")  # docs/DESIGN.md
LEGACY_TOPICS = ("_schemas",)  # the catalog's old name: read, never written
FLOW_GROUPS = ("flow-catalog-", "producer-lib-pointer-")  # producer_lib's assign-only readers
WRITER_GROUPS = ("lakehouse-writer", "spark-kafka-source-")  # the writer and Spark's source
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class SecureLayout(broker.BrokerLayout):
    """Files and ports of the secured broker (a :class:`~devstack.broker.BrokerLayout`)."""

    @classmethod
    def default(cls) -> SecureLayout:
        """``DEVSTACK_SECURE_DIR`` (else ``<home>/kafka-secure``), ``DEVSTACK_SECURE_PORT``."""
        root = os.environ.get("DEVSTACK_SECURE_DIR") or paths.home() / "kafka-secure"
        port = int(os.environ.get("DEVSTACK_SECURE_PORT", DEFAULT_PORT))
        return cls(root=Path(root), port=port)

    @property
    def certificates(self) -> tls.Certificates:
        """The dev CA and the broker's keystore."""
        return tls.Certificates(self.root / "tls")

    @property
    def credentials_file(self) -> Path:
        """The generated passwords (owner-only JSON)."""
        return self.root / "credentials.json"


@dataclass(frozen=True)
class FlowGrant:
    """What one flow may do on the secured broker.

    Attributes:
        function: The flow's function name; its user is ``flow-<function>``.
        topic_prefix: Its own topics: every topic whose name starts with this.
        environment: Deployment environment, part of its transactional ids.
        zone: Data zone, part of its transactional ids.
    """

    function: str
    topic_prefix: str
    environment: str = "dev"
    zone: str = "bronze"

    @property
    def user(self) -> str:
        """The SCRAM user of the flow."""
        return f"flow-{self.function}"

    @property
    def transactional_id_prefix(self) -> str:
        """The prefix of every transactional id the flow's producers use."""
        return f"{self.environment}.{self.zone}.{self.function}."

    @classmethod
    def parse(cls, text: str, environment: str = "dev", zone: str = "bronze") -> FlowGrant:
        """``FUNCTION=TOPIC_PREFIX`` or ``FUNCTION`` (own topics: ``FUNCTION.``)."""
        function, _, prefix = text.partition("=")
        for name, value in (("function", function), ("environment", environment), ("zone", zone)):
            if not _NAME.match(value):
                raise DevstackError(
                    f"--flow {text!r}: the {name} {value!r} must be letters, digits, _ or -"
                )
        return cls(function, prefix or f"{function}.", environment, zone)


DEFAULT_FLOWS = (FlowGrant("tpch", "tpch."),)  # the TPC-H demo flow (flows/tpch.py)


def client_conf(layout: SecureLayout, user: str, password: str) -> dict[str, str]:
    """The librdkafka settings of ``user`` on the secured broker (the password revealed)."""
    return {
        "bootstrap.servers": layout.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(layout.certificates.ca),
    }


def env_settings(layout: SecureLayout, user: str, password: str) -> dict[str, str]:
    """The ``KAFKA_*`` variables of producer_lib's ``KafkaSettings`` for ``user``."""
    return {
        "KAFKA_BOOTSTRAP_SERVERS": layout.bootstrap,
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": MECHANISM,
        "KAFKA_SSL_CA_LOCATION": str(layout.certificates.ca),
        "KAFKA_SASL_USERNAME": user,
        "KAFKA_SASL_PASSWORD": password,
    }


def status(layout: SecureLayout | None = None) -> int | None:
    """Return the pid of the running secured broker, or None."""
    layout = layout or SecureLayout.default()
    return process.running_pid(layout.pid_file, str(layout.config))


def up(
    layout: SecureLayout | None = None, flows: Iterable[FlowGrant] = DEFAULT_FLOWS
) -> SecureLayout:
    """Start the secured broker unless it runs; create the users and ACLs of ``flows``.

    Idempotent: a running broker gets the missing users and ACLs only.
    """
    layout = layout or SecureLayout.default()
    started_here = status(layout) is None
    if started_here:
        _start(layout)
    try:
        _wait_until_answering(layout)
        grant(layout, flows)
    except DevstackError:
        if started_here:
            down(layout)
        raise
    return layout


def down(layout: SecureLayout | None = None) -> bool:
    """Stop the secured broker; True if it was running. Other brokers are never touched."""
    layout = layout or SecureLayout.default()
    return process.stop(layout.pid_file, str(layout.config))


def credentials(layout: SecureLayout) -> dict[str, str]:
    """The generated password of every user (``admin``, ``writer``, ``flow-*``) so far."""
    try:
        return dict(json.loads(layout.credentials_file.read_text()))
    except FileNotFoundError:
        return {}


def admin_conf(layout: SecureLayout) -> dict[str, str]:
    """The librdkafka settings of the super user (for ACLs, users and tests' set-up)."""
    return client_conf(layout, ADMIN, _password(layout, ADMIN))


def grant(layout: SecureLayout, flows: Iterable[FlowGrant]) -> None:
    """Create the writer's and each flow's user (if new) and ACLs (idempotent)."""
    from devstack import acls

    flows = list(flows)
    users = {WRITER: _password(layout, WRITER)}
    users.update({flow.user: _password(layout, flow.user) for flow in flows})
    conf = admin_conf(layout)
    acls.upsert_scram_users(conf, users, MECHANISM, SCRAM_ITERATIONS)
    bindings = acls.writer_bindings(WRITER, WRITER_GROUPS)
    for flow in flows:
        bindings += acls.flow_bindings(flow, SYSTEM_TOPICS, LEGACY_TOPICS, FLOW_GROUPS)
    acls.create(conf, bindings)
    acls.wait_until_login_works(client_conf(layout, WRITER, users[WRITER]))


def _password(layout: SecureLayout, user: str) -> str:
    """The password of ``user``, generated and saved (owner-only) on first use."""
    known = credentials(layout)
    if user not in known:
        known[user] = secrets.token_urlsafe(18)
        layout.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(layout.credentials_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(known, out, indent=1)
    return known[user]


def properties(layout: SecureLayout, admin_password: str, keystore_password: str) -> dict[str, str]:
    """The broker configuration: the plaintext one with secured listeners and the authorizer."""
    controller = layout.port + 1
    certs = layout.certificates
    return {
        **broker.properties(layout),
        "listeners": f"SECURE://127.0.0.1:{layout.port},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"SECURE://127.0.0.1:{layout.port}",
        "inter.broker.listener.name": "SECURE",
        "listener.security.protocol.map": "SECURE:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
        # Clients and the broker itself (transaction markers) log in with SCRAM...
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.secure.sasl.enabled.mechanisms": MECHANISM,
        "listener.name.secure.scram-sha-512.sasl.jaas.config": _jaas(_SCRAM_MODULE, admin_password),
        # ...the controller with PLAIN: SCRAM users live in the metadata it serves.
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": _jaas(
            _PLAIN_MODULE, admin_password, plain_user=True
        ),
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(certs.keystore),
        "ssl.keystore.password": keystore_password,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": "none",
        "authorizer.class.name": AUTHORIZER,
        "super.users": f"User:{ADMIN}",
        "allow.everyone.if.no.acl.found": "false",
    }


def _jaas(module: str, password: str, plain_user: bool = False) -> str:
    users = f' user_{ADMIN}="{password}"' if plain_user else ""
    return f'{module} required username="{ADMIN}" password="{password}"{users};'


def _start(layout: SecureLayout) -> None:
    process.ensure_ports_free((layout.port, layout.port + 1), env_var="DEVSTACK_SECURE_PORT")
    java, classpath = tools.java(), jars.broker_classpath()
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.root.chmod(0o700)  # server.properties holds the admin and keystore passwords
    admin_password = _password(layout, ADMIN)
    keystore_password = _password(layout, "keystore")
    certs = layout.certificates
    if not certs.exist():
        tls.make_ca(certs.folder, "devstack dev CA (not for production)")
        tls.make_broker_keystore(certs, keystore_password)
    props = properties(layout, admin_password, keystore_password)
    broker.write_config(layout, props, secret=True)
    # The broker logs in to itself with the admin's SCRAM credential (transaction markers)
    # before any client could create a user: it goes into the first metadata.
    scram = f"{MECHANISM}=[name={ADMIN},password={admin_password}]"
    broker.format_storage(layout, java, classpath, None, ("--add-scram", scram), admin_password)
    pid = broker.launch(layout, java, classpath, broker.HEAP)
    log.info("started secured Kafka broker pid=%d bootstrap=%s", pid, layout.bootstrap)


def _wait_until_answering(layout: SecureLayout) -> None:
    from confluent_kafka.admin import AdminClient

    conf: dict[str, Any] = {**admin_conf(layout), "log_level": 0}
    admin = AdminClient(conf)

    def probe() -> None:
        admin.list_topics(timeout=2)
        broker.warm_up_transactions(conf)

    process.wait_until_ready(
        probe,
        lambda: status(layout) is not None,
        f"The secured Kafka broker at {layout.bootstrap}",
        layout.log_file,
        broker.START_TIMEOUT_S,
    )
