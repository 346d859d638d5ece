"""OpenLineage run events of flows: the switch, dataset naming, and building events (no I/O).

The runs against the real broker, with events sent over HTTP, are in
tests/flows/test_tpch_openlineage.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from openlineage.client.serde import Serde

from producer_lib.runner.lineage import derive_lineage
from producer_lib.runner.openlineage import OpenLineageRun, enabled
from producer_lib.runner.openlineage_events import run_event
from producer_lib.runner.openlineage_model import (
    Dataset,
    RunDatasets,
    RunFacts,
    SourceNaming,
    file_dataset,
    kafka_namespace,
    source_naming,
)
from tests.support.openlineage import check_run_event

REPO = Path(__file__).resolve().parents[3]
FACTS = RunFacts(
    run_id="0b9a3c4e-5d6f-4a1b-8c2d-3e4f5a6b7c8d",
    job_namespace="TPCH",
    job_name="tpch",
    function_name="tpch",
    dataflow="default",
    partition="0",
    load="initial",
    source_system="TPCH",
)
SQL = (
    "select o.o_orderkey, upper(c.c_name) as name, o.o_totalprice * 2 as doubled "
    "from src.orders o join src.customer c on o.o_custkey = c.c_custkey"
)
SCHEMA = {
    "src.orders": {"o_orderkey": "BIGINT", "o_custkey": "BIGINT", "o_totalprice": "DOUBLE"},
    "src.customer": {"c_custkey": "BIGINT", "c_name": "VARCHAR"},
}


def as_json(event) -> dict:
    return json.loads(Serde.to_json(event))


def datasets() -> RunDatasets:
    document = derive_lineage(SQL, "tpch.orders_x", schema=SCHEMA).to_json("commit-1")
    found = RunDatasets(
        kafka_namespace("broker-1:9092,broker-2:9092"), SourceNaming("duckdb://tpch")
    )
    found.add_commit([document], {("t.orders_x", "tpch.orders_x"): 7, ("t.other", "tpch.o"): 2})
    return found


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OPENLINEAGE_URL": "http://x:5000"}, True),
        ({"OPENLINEAGE_URL": ""}, False),
        ({"OPENLINEAGE_CONFIG": "/etc/openlineage.yml"}, True),
        ({"OPENLINEAGE__TRANSPORT__TYPE": "console"}, True),
        ({"OPENLINEAGE_URL": "http://x:5000", "OPENLINEAGE_DISABLED": "TRUE"}, False),
        ({"OPENLINEAGE_NAMESPACE": "flows", "OPENLINEAGE_ENDPOINT": "x"}, False),
    ],
)
def test_only_the_client_s_own_variables_switch_it_on(environ, on):
    assert enabled(environ) is on


def test_datasets_are_named_by_the_naming_spec():
    assert kafka_namespace("PLAINTEXT://k1:9092, k2:9092") == "kafka://k1:9092"
    assert file_dataset("/data/x.parquet") == Dataset("file", "/data/x.parquet")
    assert file_dataset("s3://bucket/a/b.csv") == Dataset("s3://bucket", "a/b.csv")
    assert file_dataset("abfss://c@acct.dfs.core.windows.net/t/orders") == Dataset(
        "abfss://c@acct.dfs.core.windows.net", "t/orders"
    )
    duck = SourceNaming("duckdb://tpch")
    assert duck.dataset("src.orders") == Dataset("duckdb://tpch", "src.orders")
    assert duck.dataset("read_parquet('/d/it''s.parquet')") == Dataset("file", "/d/it's.parquet")
    assert duck.dataset("delta_scan('s3://lake/orders')") == Dataset("s3://lake", "orders")


def test_a_postgres_reader_s_tables_get_host_port_and_database(monkeypatch):
    for name in ("PGHOST", "PGPORT", "PGDATABASE", "PGUSER"):
        monkeypatch.delenv(name, raising=False)

    class PostgresLike:
        sql_dialect = "postgres"
        dsn = "host=db.internal port=6432 dbname=lims user=flow"

    naming = source_naming(PostgresLike(), "LIMS", "")  # type: ignore[arg-type]
    assert naming.dataset("orders") == Dataset("postgres://db.internal:6432", "lims.public.orders")
    assert naming.dataset("sales.orders") == Dataset(
        "postgres://db.internal:6432", "lims.sales.orders"
    )
    PostgresLike.dsn = "postgresql://flow@pg/lims"
    naming = source_naming(PostgresLike(), "LIMS", "")  # type: ignore[arg-type]
    assert naming.dataset("x.y.z") == Dataset("postgres://pg:5432", "x.y.z")


def test_other_sources_take_the_flow_s_namespace_else_dialect_and_source_system():
    class DuckLike:
        sql_dialect = "duckdb"

    assert source_naming(DuckLike(), "TPCH", "").namespace == "duckdb://tpch"  # type: ignore[arg-type]
    assert source_naming(DuckLike(), "TPCH", "duckdb://host/x").namespace == "duckdb://host/x"  # type: ignore[arg-type]
    assert source_naming(None, "REST", "").namespace == "source://rest"


def test_start_carries_the_run_and_job_but_no_datasets():
    event = as_json(run_event("START", FACTS, datasets()))
    check_run_event(event)
    assert event["eventType"] == "START"
    assert event["run"]["runId"] == FACTS.run_id
    assert (event["job"]["namespace"], event["job"]["name"]) == ("TPCH", "tpch")
    assert event["inputs"] == [] and event["outputs"] == []
    tags = {t["key"]: t["value"] for t in event["run"]["facets"]["tags"]["tags"]}
    assert tags == {
        "function_name": "tpch",
        "dataflow": "default",
        "partition": "0",
        "load": "initial",
        "source_system": "TPCH",
    }


def test_complete_carries_inputs_outputs_and_the_column_lineage_of_the_documents():
    when = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
    event = as_json(run_event("COMPLETE", FACTS, datasets(), event_time=when))
    check_run_event(event)
    assert event["eventTime"] == "2026-11-28T10:00:00.000+00:00"
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [
        ("duckdb://tpch", "src.customer"),
        ("duckdb://tpch", "src.orders"),
    ]
    outputs = {d["name"]: d for d in event["outputs"]}
    assert {d["namespace"] for d in outputs.values()} == {"kafka://broker-1:9092"}
    assert outputs["t.orders_x"]["outputFacets"]["outputStatistics"]["rowCount"] == 7
    assert outputs["t.other"]["facets"] == {}  # rows but no SQL known: no column lineage
    lineage = outputs["t.orders_x"]["facets"]["columnLineage"]["fields"]
    assert set(lineage) == {"o_orderkey", "name", "doubled"}  # a JSON object: no order
    (key,) = lineage["o_orderkey"]["inputFields"]
    assert (key["namespace"], key["name"], key["field"]) == (
        "duckdb://tpch",
        "src.orders",
        "o_orderkey",
    )
    assert key["transformations"] == [{"type": "DIRECT", "subtype": "IDENTITY", "masking": False}]
    (name,) = lineage["name"]["inputFields"]
    assert name["transformations"][0]["subtype"] == "TRANSFORMATION"
    assert (
        name["transformations"][0]["description"] == "UPPER(src.customer.c_name)"
    )  # as _lineage has it
    schema = outputs["t.orders_x"]["facets"]["schema"]["fields"]
    assert [f["name"] for f in schema] == ["o_orderkey", "name", "doubled"]


def test_fail_carries_the_error_and_what_committed_before():
    event = as_json(run_event("FAIL", FACTS, datasets(), error="SourceError: gone"))
    check_run_event(event)
    error = event["run"]["facets"]["errorMessage"]
    assert (error["message"], error["programmingLanguage"]) == ("SourceError: gone", "PYTHON")
    assert len(event["outputs"]) == 2


def test_later_commits_add_rows_and_the_latest_document_wins():
    found = datasets()
    document = derive_lineage("select 1 as one", "tpch.orders_x").to_json("commit-2")
    found.add_commit([document], {("t.orders_x", "tpch.orders_x"): 3})
    (output, _) = found.outputs()
    assert output.rows == 10 and list(output.columns) == ["one"]
    assert output.columns["one"] == ()


def test_the_check_refuses_what_the_spec_refuses():
    event = as_json(run_event("COMPLETE", FACTS, datasets()))
    for broken in (
        {**event, "eventType": "DONE"},
        {**event, "run": {"runId": "not-a-uuid"}},
        {**event, "eventTime": "yesterday"},
        {**event, "job": {"namespace": "TPCH"}},
        {**event, "inputs": [{"namespace": "x"}]},
    ):
        with pytest.raises((AssertionError, ValueError, KeyError)):
            check_run_event(broken)


def test_off_nothing_imports_the_client():
    code = (
        "import asyncio, logging, sys\n"
        "import producer_lib, producer_lib.runner.runner, flows.tpch\n"
        "from producer_lib.runner.openlineage import OpenLineageRun\n"
        "from producer_lib.runner.openlineage_model import RunDatasets, RunFacts, SourceNaming\n"
        "run = OpenLineageRun.create(RunFacts(*['x'] * 8), "
        "RunDatasets('kafka://k:1', SourceNaming('n')), logging.getLogger())\n"
        "asyncio.run(run.start()); asyncio.run(run.complete())\n"
        "assert not run.active\n"
        "names = ('openlineage', 'producer_lib.runner.openlineage_events')\n"
        "print(sorted(m for m in sys.modules if m.startswith(names)))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]"


def test_on_without_the_client_installed_the_run_goes_on_with_a_warning(monkeypatch, caplog):
    monkeypatch.setenv("OPENLINEAGE_URL", "http://127.0.0.1:9")
    monkeypatch.setitem(sys.modules, "producer_lib.runner.openlineage_events", None)
    caplog.set_level(logging.WARNING)
    run = OpenLineageRun.create(FACTS, datasets(), logging.getLogger("flow"))
    asyncio.run(run.start())
    assert not run.active
    assert "client is not installed" in caplog.text
    assert f"flow=tpch run_id={FACTS.run_id}" in caplog.text


def test_a_transport_error_is_a_warning_naming_flow_and_run(caplog):
    class Broken:
        def send(self, *args):
            raise ConnectionError("refused")

    caplog.set_level(logging.WARNING)
    run = OpenLineageRun(FACTS, datasets(), Broken(), logging.getLogger("flow"))
    asyncio.run(run.complete())
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "COMPLETE event failed" in record.getMessage()
    assert f"flow=tpch run_id={FACTS.run_id}" in record.getMessage()


def test_the_client_leaves_the_environment_as_it_found_it(monkeypatch):
    from producer_lib.runner import openlineage_events

    monkeypatch.setenv("OPENLINEAGE_URL", "http://127.0.0.1:9")
    before = {k: v for k, v in __import__("os").environ.items() if k.startswith("OPENLINEAGE")}
    sender = openlineage_events.client_sender()
    after = {k: v for k, v in __import__("os").environ.items() if k.startswith("OPENLINEAGE")}
    assert after == before
    assert sender.client.transport.kind == "http"
    assert openlineage_events.client_sender() is sender  # one client per configuration


def test_the_file_transport_writes_events_that_pass_the_check(monkeypatch, tmp_path):
    log = tmp_path / "events.jsonl"
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(log))
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__APPEND", "true")
    run = OpenLineageRun.create(FACTS, datasets(), logging.getLogger("flow"))
    assert run.active

    async def both() -> None:
        await run.start()
        await run.complete()

    asyncio.run(both())
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    for event in events:
        check_run_event(event)
