"""The secured broker for these tests: started once for this folder, in a temp folder, then stopped.

It runs beside the devstack broker on free ports of its own. Every test here is also checked
for leaks: after it, nothing it logged or printed (Python logging, and stdout/stderr at the
file-descriptor level, where librdkafka and the JVM write) may contain a generated password.
"""

from __future__ import annotations

import gc
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Message
from confluent_kafka.admin import AdminClient, NewTopic

from devstack import secure
from devstack.secure import FlowGrant, SecureLayout
from producer_lib.settings import KafkaSettings
from tests.support.consume import read_topic
from tests.support.ports import free_port_pair


@pytest.fixture(scope="package")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureLayout]:
    """The secured broker (SASL_SSL, SCRAM-SHA-512, ACLs), with the writer user and no flows."""
    layout = SecureLayout(root=tmp_path_factory.mktemp("secured") / "kafka", port=free_port_pair())
    try:
        secure.up(layout, flows=[])
        yield layout
    finally:
        gc.collect()  # clients of failed tests would retry the stopped broker, logging each
        secure.down(layout)


@pytest.fixture
def secured_env(secured: SecureLayout, monkeypatch: pytest.MonkeyPatch) -> SecureLayout:
    """``DEVSTACK_SECURE_DIR``/``_PORT`` point at the session's broker (for ``devstack``)."""
    monkeypatch.setenv("DEVSTACK_SECURE_DIR", str(secured.root))
    monkeypatch.setenv("DEVSTACK_SECURE_PORT", str(secured.port))
    return secured


@dataclass(frozen=True)
class Flow:
    """A flow user made for one test: its grant, its settings, its librdkafka conf."""

    grant: FlowGrant
    layout: SecureLayout

    @property
    def password(self) -> str:
        """The flow's generated password."""
        return secure.credentials(self.layout)[self.grant.user]

    def topic(self, name: str) -> str:
        """One of the flow's own topics."""
        return f"{self.grant.topic_prefix}{name}"

    def env(self) -> dict[str, str]:
        """The ``KAFKA_*`` variables of the flow."""
        return secure.env_settings(self.layout, self.grant.user, self.password)

    def settings(self, **overrides: Any) -> KafkaSettings:
        """producer_lib settings of the flow (``overrides`` by field name)."""
        return settings_for(self.layout, self.grant.user, self.password, **overrides)


def settings_for(layout: SecureLayout, user: str, password: str, **overrides: Any) -> KafkaSettings:
    """producer_lib's KafkaSettings of ``user`` on the secured broker."""
    values: dict[str, Any] = {
        "bootstrap_servers": layout.bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": secure.MECHANISM,
        "sasl_username": user,
        "sasl_password": password,
        "ssl_ca_location": str(layout.certificates.ca),
        "connect_timeout_s": 10.0,
    }
    return KafkaSettings(**{**values, **overrides})


@pytest.fixture
def flow(secured: SecureLayout) -> Flow:
    """A new flow user ``flow-sec_<hex>`` owning the topics ``sec_<hex>.*``."""
    function = f"sec_{uuid.uuid4().hex[:8]}"
    grant = FlowGrant(function, f"{function}.")
    secure.grant(secured, [grant])
    return Flow(grant, secured)


@pytest.fixture
def writer_conf(secured: SecureLayout) -> dict[str, str]:
    """The librdkafka settings of the writer user."""
    password = secure.credentials(secured)[secure.WRITER]
    return secure.client_conf(secured, secure.WRITER, password)


@pytest.fixture
def admin_conf(secured: SecureLayout) -> dict[str, str]:
    """The librdkafka settings of the super user."""
    return secure.admin_conf(secured)


def create_topic(conf: dict[str, str], name: str, partitions: int = 1) -> str:
    """Create ``name`` as ``conf``'s user (the super user, for topics no flow owns)."""
    admin = AdminClient({**conf, "log_level": 3})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    return name


def read_all(
    conf: dict[str, str], topic: str, timeout_s: float = 30.0, isolation: str = "read_committed"
) -> list[Message]:
    """Every message of ``topic`` a reader with ``conf`` sees (``read_committed``), to the end."""
    group = f"lakehouse-writer-test-{uuid.uuid4().hex}"  # the writer may use only its groups
    return read_topic({**conf, "group.id": group, "log_level": 3}, topic, isolation, timeout_s)


def leaked(secrets: list[str], *texts: str) -> list[str]:
    """Which of ``secrets`` (shown by their first 4 characters only) appear in ``texts``."""
    return [s[:4] + "..." for s in secrets if any(s in text for text in texts)]


@pytest.fixture(autouse=True)
def no_secret_in_output(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture
) -> Iterator[None]:
    """After each test: no generated password in its logs or its stdout/stderr."""
    caplog.set_level(logging.DEBUG)
    yield
    if "secured" not in request.fixturenames:
        return
    layout: SecureLayout = request.getfixturevalue("secured")
    out, err = capfd.readouterr()
    formatter = logging.Formatter("%(name)s %(message)s")  # with the traceback, if any
    logged = [formatter.format(r) for when in ("setup", "call") for r in caplog.get_records(when)]
    secrets = list(secure.credentials(layout).values())
    assert not leaked(secrets, out, err, *logged), "a password reached the test's output"
