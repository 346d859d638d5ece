"""The flow authors' documentation (``shared/seeds/003``) as a test: its code, run as written.

``function_app.py``, ``runner.py``, ``reader.py`` and ``transformations.py`` in this folder hold
the document's examples verbatim; only its ``...`` placeholders are filled, and the few spots
that are not valid Python are fixed, each with a comment where it is.

- LABWARE (``function_app.run`` with the document's ``Runner``): there is no Oracle server
  here, so ``oracledb.connect_async`` is replaced by a stand-in that answers the real
  ``OracleReader``'s queries from DuckDB, dictionary views included (see ``oracle_standin.py``).
  The login comes from the secret "Labware-Source" (``SECRET_LABWARE_SOURCE``).
- StarTek (the document's ``StarTekReader`` and ``StarTekAvroSchema``, run by
  ``startek_app.py``): a local REST API (``startek_api.py``); the token comes from the secret
  "StarTek-Source" (``SECRET_STARTEK_SOURCE``).

Both run against the real broker through the real ``azure.functions`` objects, with the
document's HTTP route (no ``load`` parameter); the slow test then runs the real writer and
reads the Delta tables back: they equal the sources.
"""

from __future__ import annotations

import asyncio
import functools
import json
from datetime import UTC
from decimal import Decimal
from types import SimpleNamespace

import azure.functions as func
import oracledb
import pytest

from tests.seed import function_app, oracle_standin, startek_app
from tests.seed.startek_api import ATTRIBUTES, PAGES, StarTekApi
from tests.seed.transformations import transformations
from tests.support.decode import decoded_values
from tests.support.writer import once_argv

LABWARE_TOPIC, STARTEK_TOPIC = "SAMPLE_PLAN", "STARTEK_ATTRIBUTES"  # the documents' names
STARTEK_TOKEN = "startek-test-token"


def test_the_transformations_snippet_sums_in_duckdb():
    assert transformations() == Decimal("3.14")


@pytest.fixture
def sources(monkeypatch, kafka_bootstrap, kafka_admin):
    """The two sources, the secrets and Kafka settings the document's code reads."""
    standin = oracle_standin.StandIn()
    monkeypatch.setattr(oracledb, "connect_async", standin.connect_async)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("SECRET_LABWARE_SOURCE", oracle_standin.SECRET)
    monkeypatch.setenv("SECRET_STARTEK_SOURCE", STARTEK_TOKEN)
    monkeypatch.delenv("AZURE_KEY_VAULT_URL", raising=False)
    with StarTekApi(STARTEK_TOKEN) as api:
        monkeypatch.setenv("STARTEK_URL", api.url)
        yield SimpleNamespace(oracle=standin, startek=api, bootstrap=kafka_bootstrap)
    kafka_admin.delete_topics([LABWARE_TOPIC, STARTEK_TOPIC])


@functools.cache
def functions_of(app) -> tuple:
    """The app's functions, built once: azure.functions refuses to build them twice."""
    return tuple(app.get_functions())


def call(app, route: str) -> tuple[int, dict]:
    """Call the app's function for ``route`` as Azure would: the document's route, no load."""
    [function] = [f for f in functions_of(app) if f.get_trigger().route == route]
    request = func.HttpRequest("GET", f"http://localhost/api/{route}", body=b"")
    response = asyncio.run(function.get_user_function()(request))
    return response.status_code, json.loads(response.get_body())


def last_transaction(bootstrap: str, topic: str) -> list[dict]:
    """The rows of the topic's last transaction (earlier runs used the same topic)."""
    values = decoded_values(bootstrap, topic)
    last = max(v["__change_time"] for v in values)
    return [v for v in values if v["__change_time"] == last]


def sample_plan_source() -> list[tuple]:
    return sorted(
        (p, plant, name, target, changed.replace(tzinfo=UTC))
        for p, plant, name, target, changed in oracle_standin.SAMPLE_PLAN
    )


def startek_source() -> list[tuple]:
    return sorted((a["Name"], a["AttributeType"], a["AttributeValue"]) for a in ATTRIBUTES)


def run_labware(sources) -> list[dict]:
    # No load parameter: the runner runs the initial load, since the flow sets no pointer.
    status, body = call(function_app.app, "LABWARE/run")
    assert (status, body["status"], body["load"]) == (200, "COMPLETED", "initial"), body
    assert body["rows"] == {"LABWARE.SAMPLE_PLAN": 1 + len(oracle_standin.SAMPLE_PLAN)}
    assert [c.closed for c in sources.oracle.connections] == [True]  # opened once, closed
    return last_transaction(sources.bootstrap, LABWARE_TOPIC)


def run_startek(sources) -> list[dict]:
    status, body = call(startek_app.app, "STARTEK/run")
    assert (status, body["status"]) == (200, "COMPLETED"), body
    assert body["rows"] == {"STARTEK.STARTEK_ATTRIBUTES": 1 + len(ATTRIBUTES)}
    assert sources.startek.requests == {page: 1 for page in range(1, PAGES + 1)}
    return last_transaction(sources.bootstrap, STARTEK_TOPIC)


# The documented calls are plain: a deprecation warning of ours fails the run (and the test).
no_deprecation = pytest.mark.filterwarnings(
    "error::producer_lib._deprecation.FlowPlatformDeprecationWarning"
)


@pytest.mark.kafka
@no_deprecation
def test_the_labware_function_publishes_the_oracle_table(sources):
    rows = run_labware(sources)
    assert [v["__change_type"] for v in rows] == ["T"] + ["R"] * len(oracle_standin.SAMPLE_PLAN)
    published = sorted(
        (v["PLAN_ID"], v["PLANT_ID"], v["NAME"], v["TARGET"], v["CHANGED_ON"]) for v in rows[1:]
    )
    assert published == sample_plan_source()


@pytest.mark.kafka
@no_deprecation
def test_the_startek_reader_loads_every_page_without_await(sources):
    rows = run_startek(sources)
    assert [v["__change_type"] for v in rows] == ["T"] + ["R"] * len(ATTRIBUTES)
    published = sorted((v["Name"], v["AttributeType"], v["AttributeValue"]) for v in rows[1:])
    assert published == startek_source()


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_the_documented_flows_land_in_delta_equal_to_their_sources(
    sources, spark, tmp_path, monkeypatch
):
    from lakehouse_writer.cli import main

    run_labware(sources)
    run_startek(sources)
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    monkeypatch.delenv("LAKEHOUSE_SCHEMAS_TOPIC", raising=False)  # where the producer wrote
    argv = once_argv(lake, ckpt, f"{LABWARE_TOPIC}|{STARTEK_TOPIC}", sources.bootstrap)
    assert main(argv) == 0

    def delta(path, *columns):
        return sorted(
            tuple(r)
            for r in spark.read.format("delta").load(str(lake / path)).select(*columns).collect()
        )

    plans = delta("LABWARE/SAMPLE_PLAN", "PLAN_ID", "PLANT_ID", "NAME", "TARGET", "CHANGED_ON")
    assert [(*p[:4], p[4].replace(tzinfo=UTC)) for p in plans] == sample_plan_source()
    attributes = delta("STARTEK/STARTEK_ATTRIBUTES", "Name", "AttributeType", "AttributeValue")
    assert attributes == startek_source()
