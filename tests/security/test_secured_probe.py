"""The writer's Kafka probe on the secured broker: a refused login or certificate is named.

Before, a wrong password looked like a cluster that did not answer: the probe waited the
whole connect timeout and said "did not answer within 5 s (Broker transport failure);
check ... the network". Now it stops at the client's first refused handshake and names the
settings to check (never their values). No Spark here: the probe runs before Spark starts.
"""

from __future__ import annotations

import time
import uuid

import pytest

from devstack import secure, tls
from lakehouse_writer.errors import Transient
from lakehouse_writer.runtime.probe import KafkaRefused, probe_kafka

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
SLOW_S = 30.0  # the connect timeout a refused start must not wait for
FAST_S = 5.0  # within this a refused login or certificate is reported


def _refused(conf: dict[str, str]) -> tuple[KafkaRefused, float]:
    started = time.monotonic()
    with pytest.raises(KafkaRefused) as refused:
        probe_kafka(conf, SLOW_S)
    return refused.value, time.monotonic() - started


def test_the_writers_own_credentials_pass_the_probe(writer_conf):
    started = time.monotonic()
    probe_kafka(writer_conf, SLOW_S)
    assert time.monotonic() - started < FAST_S


def test_a_wrong_password_is_named_as_authentication_at_once(secured, writer_conf):
    wrong = f"wrong-{uuid.uuid4().hex}"
    error, took = _refused({**writer_conf, "sasl.password": wrong})

    text = str(error)
    assert took < FAST_S  # not the 30 s connect timeout
    assert not isinstance(error, Transient)  # a restart with these settings fails the same
    assert text.startswith(f"Kafka at {secured.bootstrap} refused the writer: authentication")
    assert "KAFKA_SASL_USERNAME" in text and "KAFKA_SASL_PASSWORD" in text
    assert "invalid credentials" in text  # the broker's own reason
    assert f"sasl_username='{secure.WRITER}'" in text
    assert "did not answer" not in text and "network" not in text
    secrets = [wrong, *secure.credentials(secured).values()]
    assert not [s[:4] for s in secrets if s in text or s in repr(error)]


def test_an_untrusted_certificate_is_named_as_tls_at_once(secured, writer_conf, tmp_path):
    rogue = tls.make_ca(tmp_path / "rogue", "a CA that did not sign the broker")
    error, took = _refused({**writer_conf, "ssl.ca.location": str(rogue.ca)})

    text = str(error)
    assert took < FAST_S
    assert not isinstance(error, Transient)
    assert "TLS handshake failed" in text and "KAFKA_SSL_CA_LOCATION" in text
    assert "certificate verify failed" in text
    assert str(rogue.ca) not in text  # the setting's name, not its value
    assert not [s[:4] for s in secure.credentials(secured).values() if s in text]
