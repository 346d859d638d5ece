"""The writer reaches Kafka with producer_lib's settings: same refusals, JAAS built safely.

The JAAS string is read back by Kafka's own Java client (``JaasContext``, the parser the
Spark Kafka source uses), not by a re-implementation of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lakehouse_writer.settings import LakehouseSettings, jaas_config, jaas_quote
from producer_lib.errors import ConfigError
from producer_lib.settings import KafkaSettings

PASSWORD = 'pa"ss\\w\\"rd\nS3cr3t'

_PARSE_JAAS = """
import java.util.Map;
import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.common.security.JaasContext;

public class ParseJaas {
    public static void main(String[] args) throws Exception {
        String jaas = new String(System.in.readAllBytes(), "UTF-8");
        Map<String, ?> options = JaasContext
            .loadClientContext(Map.of("sasl.jaas.config", new Password(jaas)))
            .configurationEntries().get(0).getOptions();
        System.out.print(options.get("username") + "\\u0000" + options.get("password"));
    }
}
"""


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no stray .env
    for name in [n for n in os.environ if n.startswith(("KAFKA_", "SCHEMA_REGISTRY_"))]:
        monkeypatch.delenv(name)


def _sasl(**more: str) -> dict[str, str]:
    return {
        "KAFKA_BOOTSTRAP_SERVERS": "b:9093",
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": "PLAIN",
        "KAFKA_SASL_USERNAME": 'us"er',
        "KAFKA_SASL_PASSWORD": PASSWORD,
        **more,
    }


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_PASSWORD": "S3cr3t"},
            "KAFKA_SASL_MECHANISM=PLAIN needs KAFKA_SECURITY_PROTOCOL",
            id="plain",
        ),
        pytest.param(
            {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
            "needs KAFKA_SASL_MECHANISM",
            id="sasl-without-mechanism",
        ),
        pytest.param(
            {"KAFKA_SECURITY_PROTOCOL": "TLS"}, "KAFKA_SECURITY_PROTOCOL", id="bad-protocol"
        ),
        pytest.param(
            {"SCHEMA_REGISTRY_BASIC_AUTH_PASSWORD": "S3cr3t"},
            "SCHEMA_REGISTRY_BASIC_AUTH_USER",
            id="registry",
        ),
    ],
)
def test_writer_refuses_what_the_producer_refuses(monkeypatch, env, message):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message) as caught:
        LakehouseSettings(LAKEHOUSE_PATH="/lake")
    assert "S3cr3t" not in str(caught.value)


def test_keyword_arguments_reach_the_kafka_settings():
    with pytest.raises(ConfigError, match="KAFKA_SASL_MECHANISM=PLAIN needs"):
        LakehouseSettings(KAFKA_SASL_MECHANISM="PLAIN", KAFKA_SASL_PASSWORD="x")


def test_default_bootstrap_is_the_local_broker():
    settings = LakehouseSettings()
    assert settings.spark_kafka_options() == {
        "kafka.bootstrap.servers": "127.0.0.1:19092",
        "kafka.security.protocol": "PLAINTEXT",
    }
    assert settings.kafka_client_conf()["bootstrap.servers"] == "127.0.0.1:19092"


def test_sasl_options_for_spark_and_librdkafka(monkeypatch):
    for name, value in _sasl(KAFKA_SSL_CA_LOCATION="/ca.pem").items():
        monkeypatch.setenv(name, value)
    settings = LakehouseSettings()
    options = settings.spark_kafka_options()
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "PLAIN"
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.location"] == "/ca.pem"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="us\\"er" password="pa\\"ss\\\\w\\\\\\"rd\\nS3cr3t";'
    )
    assert settings.kafka_client_conf()["sasl.password"] == PASSWORD
    assert "S3cr3t" not in repr(settings) + str(settings)


def test_oauth_options():
    kafka = KafkaSettings(
        bootstrap_servers="b:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        oauth_token_endpoint_url="https://idp/t",
        oauth_client_id="cid",
        oauth_client_secret='s"ec',
        oauth_scope="kafka",
    )
    options = LakehouseSettings(kafka=kafka).spark_kafka_options()
    assert options["kafka.sasl.oauthbearer.token.endpoint.url"] == "https://idp/t"
    assert options["kafka.sasl.login.callback.handler.class"].endswith(
        "oauthbearer.OAuthBearerLoginCallbackHandler"
    )
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'clientId="cid" clientSecret="s\\"ec" scope="kafka";'
    )


@pytest.mark.parametrize("value", ["plain", 'a"b', "a\\b", '\\"', "x\ny\rz", ""])
def test_jaas_quote_escapes(value):
    quoted = jaas_quote(value)
    assert quoted.startswith('"') and quoted.endswith('"')
    assert "\n" not in quoted and "\r" not in quoted


def _java_classpath() -> str | None:
    """kafka-clients as Spark uses it, and slf4j from pyspark; None when one is absent."""
    try:
        import pyspark

        from devstack import jars
    except ImportError:
        return None
    spark = jars.jar_dir("spark")
    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    if not list(spark.glob("kafka-clients-*.jar")) or not pyspark_jars.is_dir():
        return None
    return f"{spark}/*{os.pathsep}{pyspark_jars}/*"


def test_kafka_reads_the_jaas_back_unchanged(tmp_path):
    java, classpath = shutil.which("java"), _java_classpath()
    if java is None or classpath is None:
        pytest.skip("needs java and the devstack Spark jars (kafka-clients) with pyspark")
    source = tmp_path / "ParseJaas.java"
    source.write_text(_PARSE_JAAS)
    kafka = KafkaSettings(**{k.removeprefix("KAFKA_").lower(): v for k, v in _sasl().items()})
    done = subprocess.run(
        [java, "-cp", classpath, str(source)],
        input=jaas_config(kafka),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\0") == ['us"er', PASSWORD]
