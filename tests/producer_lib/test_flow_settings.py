"""get_environment, OracleConnectionSettings and settings errors that name the variable."""

from __future__ import annotations

import json
import os

import pytest
from pydantic import SecretStr

from producer_lib.errors import ConfigError
from producer_lib.settings import (
    KafkaSecretSettings,
    KafkaSettings,
    OracleConnectionSettings,
    SchemaRegistrySettings,
    get_environment,
)

PASSWORD = 'pa"ss/w@rd\\S3cr3t'


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no stray .env
    prefixes = ("KAFKA_", "SCHEMA_REGISTRY_", "FLOW_", "AZURE_", "SECRET_")
    for name in [n for n in os.environ if n.startswith(prefixes)]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({}, "dev", id="default"),
        pytest.param({"FLOW_ENVIRONMENT": "prod"}, "prod", id="flow-environment"),
        pytest.param({"AZURE_FUNCTIONS_ENVIRONMENT": "Production"}, "production", id="azure"),
        pytest.param(
            {"FLOW_ENVIRONMENT": "test", "AZURE_FUNCTIONS_ENVIRONMENT": "Production"},
            "test",
            id="flow-wins",
        ),
    ],
)
def test_get_environment(monkeypatch, env, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert get_environment() == expected


def test_get_environment_reads_dotenv(tmp_path):
    (tmp_path / ".env").write_text("FLOW_ENVIRONMENT=qa\n")
    assert get_environment() == "qa"


def test_get_environment_refuses_what_a_transactional_id_cannot_hold(monkeypatch):
    monkeypatch.setenv("FLOW_ENVIRONMENT", "my env")
    with pytest.raises(ConfigError, match="FLOW_ENVIRONMENT"):
        get_environment()


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(
            json.dumps({"user": "scott", "password": PASSWORD, "dsn": "db:1521/svc"}), id="json"
        ),
        pytest.param(f"scott/{PASSWORD}@db:1521/svc", id="connect-string"),
    ],
)
def test_oracle_settings_from_a_secret(monkeypatch, value):
    monkeypatch.setenv("SECRET_LABWARE_SOURCE", value)
    oracle = OracleConnectionSettings("Labware-Source")
    assert (oracle.user, oracle.dsn) == ("scott", "db:1521/svc")
    assert isinstance(oracle.password, SecretStr)
    assert oracle.password.get_secret_value() == PASSWORD
    assert "S3cr3t" not in repr(oracle) + str(oracle)
    with pytest.raises(Exception, match="frozen"):
        oracle.user = "other"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(None, "secret not found", id="missing"),
        pytest.param("scott:S3cr3t@db", "user/password@dsn", id="no-slash"),
        pytest.param('{"user": "scott", "pass": "S3cr3t"}', "password, dsn", id="json-keys"),
        pytest.param('{"user": "scott", "password": "S3cr3t"', "user/password@dsn", id="bad-json"),
        pytest.param(
            '{"user": "", "password": "S3cr3t", "dsn": "d"}', "invalid user", id="empty-user"
        ),
    ],
)
def test_oracle_secret_errors_name_the_secret_not_its_value(monkeypatch, value, message):
    if value is not None:
        monkeypatch.setenv("SECRET_LABWARE_SOURCE", value)
    with pytest.raises(ConfigError, match=message) as caught:
        OracleConnectionSettings("Labware-Source")
    assert "Labware-Source" in str(caught.value) and "SECRET_LABWARE_SOURCE" in str(caught.value)
    assert "S3cr3t" not in str(caught.value) + repr(caught.value)


def test_kafka_secret_settings_needs_no_arguments(monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "b:9092")
    assert KafkaSecretSettings().bootstrap_servers == "b:9092"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({}, "KAFKA_BOOTSTRAP_SERVERS is not set", id="no-bootstrap"),
        pytest.param(
            {"KAFKA_BOOTSTRAP_SERVERS": "b:1", "KAFKA_SASL_MECHANISM": "PLAIN"},
            "KAFKA_SASL_MECHANISM=PLAIN needs KAFKA_SECURITY_PROTOCOL SASL_PLAINTEXT or SASL_SSL "
            "(KAFKA_SECURITY_PROTOCOL is not set)",
            id="mechanism-without-protocol",
        ),
        pytest.param(
            {"KAFKA_BOOTSTRAP_SERVERS": "b:1", "KAFKA_SECURITY_PROTOCOL": "TLS"},
            "KAFKA_SECURITY_PROTOCOL: Input should be",
            id="bad-protocol",
        ),
        pytest.param(
            {"KAFKA_BOOTSTRAP_SERVERS": "b:1", "KAFKA_TOPIC_PARTITIONS": "0"},
            "KAFKA_TOPIC_PARTITIONS",
            id="zero-partitions",
        ),
        pytest.param(
            {"KAFKA_BOOTSTRAP_SERVERS": "b:1", "KAFKA_OVERRIDES": "{"},
            "KAFKA_OVERRIDES is not valid JSON",
            id="overrides-not-json",
        ),
    ],
)
def test_kafka_errors_name_the_variable(monkeypatch, env, message):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        KafkaSettings()
    assert message in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_keyword_arguments_are_named_like_the_variable():
    with pytest.raises(
        ConfigError,
        match="KAFKA_SASL_MECHANISM=SCRAM-SHA-256 needs KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD",
    ):
        KafkaSettings(
            bootstrap_servers="b:1", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256"
        )


def test_registry_error_names_both_variables(monkeypatch):
    monkeypatch.setenv("SCHEMA_REGISTRY_BASIC_AUTH_PASSWORD", "S3cr3t")
    with pytest.raises(ConfigError, match="SCHEMA_REGISTRY_BASIC_AUTH_USER") as caught:
        SchemaRegistrySettings()
    assert "S3cr3t" not in str(caught.value)


def test_empty_trigger_and_catalog_variables_mean_their_defaults(monkeypatch, tmp_path):
    from producer_lib.settings import SchemaRegistrySettings, TriggerSettings

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLOW_HTTP_WAIT_S", "")
    monkeypatch.setenv("FLOW_SCHEMAS_TOPIC", " ")
    assert TriggerSettings().http_wait_s == 200.0
    assert SchemaRegistrySettings().schemas_topic == "_flow_schemas"
    monkeypatch.setenv("FLOW_HTTP_WAIT_S", "-1")
    with pytest.raises(ConfigError, match="FLOW_HTTP_WAIT_S"):
        TriggerSettings()
