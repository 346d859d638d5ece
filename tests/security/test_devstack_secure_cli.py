"""``devstack up --secure``: what it prints, what it grants, and that it leaves the rest alone.

The session's secured broker runs already (``secured_env`` points ``devstack`` at it),
so ``up --secure`` is the idempotent path: it adds the requested flow users and prints.
"""

from __future__ import annotations

import os
import stat
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from devstack import broker, secure
from devstack.cli import main
from producer_lib.settings import KafkaSettings
from tests.security.conftest import create_topic
from tests.support.ports import free_port_pair

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _parse(text: str) -> list[dict[str, str]]:
    """The printed blocks of ``NAME=value`` lines, one dict per user."""
    blocks: list[dict[str, str]] = [{}]
    for line in text.splitlines():
        if not line.strip():
            blocks.append({})
        elif "=" in line and not line.startswith("#"):
            name, _, value = line.partition("=")
            blocks[-1][name] = value
    return [b for b in blocks if b]


def test_up_secure_prints_each_users_settings_and_never_the_admin_password(secured_env, capfd):
    function = f"cli_{uuid.uuid4().hex[:6]}"
    assert main(["up", "--secure", "--flow", f"{function}=cli.{function}."]) == 0
    out = capfd.readouterr().out

    users = {b["KAFKA_SASL_USERNAME"]: b for b in _parse(out)}
    assert set(users) == {f"flow-{function}", "writer"}
    for block in users.values():
        assert block["KAFKA_BOOTSTRAP_SERVERS"] == secured_env.bootstrap
        KafkaSettings(**{k.removeprefix("KAFKA_").lower(): v for k, v in block.items()})
    assert "DEV-ONLY" in out and f"transactional ids dev.bronze.{function}." in out
    passwords = secure.credentials(secured_env)
    assert passwords[secure.ADMIN] not in out and passwords["keystore"] not in out
    assert users["writer"]["KAFKA_SASL_PASSWORD"] == passwords["writer"]

    env = {b: v for b, v in os.environ.items() if b.startswith("KAFKA_")}
    assert env.get("KAFKA_BOOTSTRAP_SERVERS") != secured_env.bootstrap  # nothing exported


def test_the_printed_settings_log_in_and_see_what_their_acls_allow(secured_env, capfd, admin_conf):
    function = f"cli_{uuid.uuid4().hex[:6]}"
    main(["up", "--secure", "--flow", f"{function}=cli.{function}."])
    printed = {b["KAFKA_SASL_USERNAME"]: b for b in _parse(capfd.readouterr().out)}
    own = create_topic(admin_conf, f"cli.{function}.orders")
    foreign = create_topic(admin_conf, f"someone_else.{uuid.uuid4().hex[:8]}")

    def visible(user: str) -> set[str]:
        block = printed[user]
        conf = secure.client_conf(secured_env, user, block["KAFKA_SASL_PASSWORD"])
        return set(AdminClient({**conf, "log_level": 3}).list_topics(timeout=10).topics)

    assert own in visible(f"flow-{function}") and foreign not in visible(f"flow-{function}")
    assert {own, foreign} <= visible("writer")


def test_env_secure_prints_one_user_and_refuses_unknown_ones(secured_env, capfd):
    assert main(["env", "--secure", "--user", "writer"]) == 0
    printed = _parse(capfd.readouterr().out)
    assert [b["KAFKA_SASL_USERNAME"] for b in printed] == ["writer"]
    assert printed[0]["KAFKA_SSL_CA_LOCATION"] == str(secured_env.certificates.ca)

    assert main(["env", "--secure", "--user", "admin-or-not"]) == 1
    err = capfd.readouterr().err
    assert "no user 'admin-or-not'" in err and "writer" in err
    assert main(["env", "--secure", "--user", "keystore"]) == 1  # not a user
    assert secure.credentials(secured_env)["keystore"] not in capfd.readouterr().err


def test_status_shows_both_brokers_and_the_plaintext_one_is_untouched(secured_env, capfd):
    plain = broker.BrokerLayout.default()
    plain_pid = broker.status(plain)
    assert main(["status"]) in (0, 3)
    out = capfd.readouterr().out
    assert f"kafka (secured): running at {secured_env.bootstrap}" in out
    assert plain.port != secured_env.port and plain.root != secured_env.root
    assert broker.status(plain) == plain_pid


def test_secrets_files_are_owner_only(secured):
    for path in (
        secured.credentials_file,
        secured.config,
        secured.certificates.ca_key,
        secured.certificates.keystore,
    ):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(secured.root.stat().st_mode) == 0o700


def test_up_secure_starts_and_down_secure_stops_only_it(tmp_path, monkeypatch, capfd):
    port = free_port_pair()
    monkeypatch.setenv("DEVSTACK_SECURE_DIR", str(tmp_path / "kafka-secure"))
    monkeypatch.setenv("DEVSTACK_SECURE_PORT", str(port))
    plain_pid = broker.status(broker.BrokerLayout.default())
    try:
        assert main(["up", "--secure"]) == 0
        out = capfd.readouterr().out
        assert f"kafka (secured): started at 127.0.0.1:{port}" in out
        assert "KAFKA_SASL_USERNAME=flow-tpch" in out  # the default flow: the TPC-H demo
        assert main(["down", "--secure"]) == 0
        assert "kafka (secured): stopped" in capfd.readouterr().out
        assert secure.status() is None
    finally:
        secure.down()
    assert broker.status(broker.BrokerLayout.default()) == plain_pid
