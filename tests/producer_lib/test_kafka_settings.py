"""KafkaSettings / SchemaRegistrySettings: environment, librdkafka keys, validation, secrets."""

from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError

from producer_lib.errors import ConfigError
from producer_lib.settings import KafkaSecretSettings, KafkaSettings, SchemaRegistrySettings

SECRET = "s3cr3t-Pa55"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no stray .env
    for name in (
        "BOOTSTRAP_SERVERS",
        "SECURITY_PROTOCOL",
        "SASL_MECHANISM",
        "SASL_USERNAME",
        "SASL_PASSWORD",
        "OVERRIDES",
        "TOPIC_PARTITIONS",
    ):
        monkeypatch.delenv(f"KAFKA_{name}", raising=False)
    for name in ("URL", "BASIC_AUTH_USER", "BASIC_AUTH_PASSWORD"):
        monkeypatch.delenv(f"SCHEMA_REGISTRY_{name}", raising=False)


def _sasl(**extra) -> KafkaSettings:
    return KafkaSettings(
        bootstrap_servers="b:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="user",
        sasl_password=SECRET,
        **extra,
    )


def test_reads_environment_and_builds_dotted_keys(monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "b1:9093,b2:9093")
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KAFKA_SASL_MECHANISM", "PLAIN")
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "user")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", SECRET)
    monkeypatch.setenv("KAFKA_OVERRIDES", '{"linger.ms": 5, "client.id": "me"}')
    conf = KafkaSettings().to_librdkafka()
    assert conf == {
        "bootstrap.servers": "b1:9093,b2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "user",
        "sasl.password": SECRET,
        "linger.ms": 5,
        "client.id": "me",
    }


def test_env_file_is_read(tmp_path):
    (tmp_path / ".env").write_text("KAFKA_BOOTSTRAP_SERVERS=fromfile:9092\n")
    assert KafkaSettings().bootstrap_servers == "fromfile:9092"


def test_plaintext_defaults():
    settings = KafkaSettings(bootstrap_servers="b:9092")
    assert settings.to_librdkafka() == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "PLAINTEXT",
    }
    assert settings.topic_partitions == 1


def test_ssl_ca_location():
    conf = KafkaSettings(
        bootstrap_servers="b:9093", security_protocol="SSL", ssl_ca_location="/ca.pem"
    ).to_librdkafka()
    assert conf["ssl.ca.location"] == "/ca.pem"


def test_oauthbearer_oidc():
    conf = KafkaSettings(
        bootstrap_servers="b:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        oauth_token_endpoint_url="https://idp/token",
        oauth_client_id="cid",
        oauth_client_secret=SECRET,
        oauth_scope="kafka",
    ).to_librdkafka()
    assert conf["sasl.oauthbearer.method"] == "oidc"
    assert conf["sasl.oauthbearer.client.secret"] == SECRET
    assert conf["sasl.oauthbearer.scope"] == "kafka"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param(
            {"security_protocol": "SASL_SSL"},
            "needs KAFKA_SASL_MECHANISM",
            id="sasl-without-mechanism",
        ),
        pytest.param(
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "u"},
            "KAFKA_SASL_PASSWORD",
            id="sasl-without-password",
        ),
        pytest.param(
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "SCRAM-SHA-256",
                "sasl_password": "p",
            },
            "KAFKA_SASL_USERNAME",
            id="sasl-without-user",
        ),
        pytest.param(
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"},
            "KAFKA_OAUTH_TOKEN_ENDPOINT_URL",
            id="oauth-without-endpoint",
        ),
        pytest.param(
            {"sasl_mechanism": "PLAIN"},
            "needs KAFKA_SECURITY_PROTOCOL",
            id="mechanism-without-sasl",
        ),
        pytest.param({"security_protocol": "TLS"}, "KAFKA_SECURITY_PROTOCOL", id="bad-protocol"),
        pytest.param({"topic_partitions": 0}, "KAFKA_TOPIC_PARTITIONS", id="zero-partitions"),
    ],
)
def test_invalid_settings_say_what_is_missing(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        KafkaSettings(bootstrap_servers="b:9092", **kwargs)


def test_bootstrap_servers_required():
    with pytest.raises(ConfigError, match="KAFKA_BOOTSTRAP_SERVERS is not set"):
        KafkaSettings()


def test_settings_are_frozen():
    settings = KafkaSettings(bootstrap_servers="b:9092")
    with pytest.raises(ValidationError):
        settings.bootstrap_servers = "other:9092"


def test_secrets_never_in_repr_str_or_logs(caplog):
    settings = _sasl(overrides={"ssl.key.password": SECRET})
    registry = SchemaRegistrySettings(
        url="https://r", basic_auth_user="u", basic_auth_password=SECRET
    )
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("t").info(
            "settings %s %r %s %r %s", settings, settings, registry, registry, settings.describe()
        )
    shown = " ".join(
        [
            repr(settings),
            str(settings),
            repr(registry),
            str(registry),
            settings.describe(),
            caplog.text,
            str(settings.model_dump()),
        ]
    )
    assert SECRET not in shown
    assert "b:9093" in settings.describe()


def test_kafka_secret_settings_is_the_same_thing(monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "b:9092")
    assert isinstance(KafkaSecretSettings(), KafkaSettings)
    assert KafkaSecretSettings().to_librdkafka()["bootstrap.servers"] == "b:9092"


def test_schema_registry_from_env(monkeypatch):
    monkeypatch.setenv("SCHEMA_REGISTRY_URL", "http://registry:8080/apis/ccompat/v7")
    monkeypatch.setenv("SCHEMA_REGISTRY_BASIC_AUTH_USER", "u")
    monkeypatch.setenv("SCHEMA_REGISTRY_BASIC_AUTH_PASSWORD", SECRET)
    registry = SchemaRegistrySettings()
    assert registry.configured
    assert registry.to_client_config() == {
        "url": "http://registry:8080/apis/ccompat/v7",
        "basic.auth.user.info": f"u:{SECRET}",
    }


def test_schema_registry_unconfigured():
    registry = SchemaRegistrySettings()
    assert not registry.configured
    with pytest.raises(ConfigError, match="SCHEMA_REGISTRY_URL"):
        registry.to_client_config()


def test_schema_registry_user_without_password():
    with pytest.raises(ConfigError, match="set both or neither"):
        SchemaRegistrySettings(url="http://r", basic_auth_user="u")


def test_schema_registry_bearer_token_and_tls_from_env(monkeypatch):
    monkeypatch.setenv("SCHEMA_REGISTRY_URL", "https://registry")
    monkeypatch.setenv("SCHEMA_REGISTRY_BEARER_AUTH_TOKEN", SECRET)
    monkeypatch.setenv("SCHEMA_REGISTRY_BEARER_AUTH_LOGICAL_CLUSTER", "lsrc-1")
    monkeypatch.setenv("SCHEMA_REGISTRY_SSL_CA_LOCATION", "/etc/ca.pem")
    monkeypatch.setenv("SCHEMA_REGISTRY_SSL_CERTIFICATE_LOCATION", "/etc/me.pem")
    monkeypatch.setenv("SCHEMA_REGISTRY_SSL_KEY_LOCATION", "/etc/me.key")
    registry = SchemaRegistrySettings()
    assert registry.to_client_config() == {
        "url": "https://registry",
        "bearer.auth.credentials.source": "STATIC_TOKEN",
        "bearer.auth.token": SECRET,
        "bearer.auth.logical.cluster": "lsrc-1",
        "ssl.ca.location": "/etc/ca.pem",
        "ssl.certificate.location": "/etc/me.pem",
        "ssl.key.location": "/etc/me.key",
    }
    assert registry.login == "SCHEMA_REGISTRY_BEARER_AUTH_TOKEN"
    assert SECRET not in repr(registry)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"basic_auth_user": "u", "basic_auth_password": SECRET, "bearer_auth_token": SECRET},
            "two ways to log in",
        ),
        ({"ssl_key_location": "/k"}, "needs SCHEMA_REGISTRY_SSL_CERTIFICATE_LOCATION"),
    ],
    ids=["basic-and-bearer", "key-without-certificate"],
)
def test_schema_registry_login_settings_that_contradict(values, message):
    with pytest.raises(ConfigError, match=message) as raised:
        SchemaRegistrySettings(url="https://r", **values)
    assert SECRET not in str(raised.value)
