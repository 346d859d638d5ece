"""See it run (issue 44): a writer fed by a flow, its status page in a real browser, Prometheus.

One running writer for the module (``lakehouse-writer run`` in its own process, metrics on a
loopback port) applies what a real flow (``NumbersFlow``: an initial load, delta loads, one
that fails) and a producer of junk send through the real broker. The status page is served
by ``UiServer`` over the same lakehouse and checkpoint, behind a function key, and read by
Debian's headless chromium: its numbers must equal what the system tables and the Delta
tables hold, read here another way (full scans). The screenshot is kept at
``tests/artifacts/status-page.png``. Last, a real Prometheus scrapes the writer with the
shipped alert rules (their ``for:`` shortened): the rejected-rows alert fires while it runs,
``LakehouseWriterDown`` once it is stopped, and every panel of the shipped Grafana dashboard
queries without error.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from lakehouse_writer.ops.ui.server import FUNCTION_NAME, UiServer
from lakehouse_writer.ops.ui.snapshot import Overview
from lakehouse_writer.settings import LakehouseSettings
from producer_lib import RunFailed
from producer_lib.auth import Authenticator, AuthSettings
from tests.support.browser import (
    ARTIFACTS,
    PrometheusServer,
    chromium,
    full_page_screenshot,
    need,
    wait_until,
)
from tests.support.kafka import topic_name
from tests.support.metrics import samples
from tests.support.ports import free_port_block
from tests.support.runner_flows import NumbersFlow
from tests.support.writer import (
    WriterProcess,
    produce_transaction,
    publish_schemas,
    sample_schema,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
KEY = "see-it-run-" + uuid.uuid4().hex * 2
TABLE = "TEST.NUMBERS"
DELTAS = 6  # successful delta loads, 5 rows each, after the initial load's 10
SCREENSHOT = ARTIFACTS / "status-page.png"
ORDERS = sample_schema()  # SHOP.ORDERS: a second table, from a burst of plain transactions
BURST = 900


@dataclass
class Stack:
    work: Path
    lake: Path
    checkpoint: Path
    topic: str
    bootstrap: str
    function: str
    writer: WriterProcess
    metrics_port: int
    ui: str


def _flow(load: str) -> Any:
    try:
        return asyncio.run(NumbersFlow().run(load))
    except RunFailed as failed:
        return failed.result


def _burst(bootstrap: str, topic: str, schemas: str) -> None:
    """:data:`BURST` rows of another table in 15 transactions: more than a batch may read
    (``--max-offsets-per-trigger``), so the lag rises and drains over several batches."""
    publish_schemas(bootstrap, topic, schemas, ORDERS)
    now_us = int(time.time() * 1_000_000)
    per = BURST // 15
    for t in range(15):
        rows = [
            {
                "ID": i,
                "NAME": f"n{i}",
                "__change_type": "I",
                "__change_time": now_us + t,
                "partition": i % 2,
            }
            for i in range(t * per, (t + 1) * per)
        ]
        produce_transaction(bootstrap, topic, ORDERS, rows)


def _feed(topic: str, schemas: str, bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flow's runs, spread over some 40 s so that the plots have a shape; junk once."""
    assert _flow("initial").status == "COMPLETED"
    for n in range(DELTAS):
        if n == 1:
            _burst(bootstrap, topic, schemas)
        if n == 2:
            monkeypatch.setenv("RUNNER_TEST_FAIL", "after_produce")
            assert _flow("delta").status == "FAILED"
            monkeypatch.delenv("RUNNER_TEST_FAIL")
            junk = [(topic, b"k", b"junk")]
            produce_transaction(bootstrap, topic, ORDERS, [], extra=junk)
        assert _flow("delta").status == "COMPLETED"
        time.sleep(6)


def _scan(path: Path, sql: str) -> list[dict[str, Any]]:
    return list(
        pa.table(QueryBuilder().register("t", DeltaTable(str(path))).execute(sql)).to_pylist()
    )


def _applied(stack_lake: Path, function: str) -> bool:
    """Every row and run of the flow is in the lakehouse."""
    rows = _scan(stack_lake / "TEST" / "NUMBERS", "SELECT count(*) AS n FROM t")[0]["n"]
    done = _scan(
        stack_lake / "_execution_log",
        f"SELECT count(*) AS n FROM t WHERE function_name = '{function}' AND status <> 'STARTED'",
    )[0]["n"]
    orders = _scan(stack_lake / "SHOP" / "ORDERS", "SELECT count(*) AS n FROM t")[0]["n"]
    return rows == 10 + 5 * DELTAS and done == DELTAS + 2 and orders == BURST


@pytest.fixture(scope="module")
def stack(kafka_bootstrap, kafka_admin, tmp_path_factory) -> Iterator[Stack]:
    from confluent_kafka.admin import NewTopic

    if not any(shutil.which(p) for p in ("chromium", "prometheus")):  # spare the writer's start
        need("chromium")
    work = tmp_path_factory.mktemp("see_it_run")
    topic, schemas = topic_name("see_it_run"), topic_name("see_it_run", "_schemas")
    created = kafka_admin.create_topics(
        [NewTopic(topic, 2, 1), NewTopic(schemas, 1, 1, config={"cleanup.policy": "compact"})]
    )
    for future in created.values():
        future.result(timeout=30)
    function = f"seeitrun_{uuid.uuid4().hex[:8]}"
    lake, checkpoint, port = work / "lake", work / "ckpt", free_port_block(1)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {
            "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "RUNNER_TEST_FUNCTION": function,
            "RUNNER_TEST_TOPIC": topic,
            "FLOW_SCHEMAS_TOPIC": schemas,  # the flow's and the writer's catalog
        }.items():
            mp.setenv(name, value)
        writer = WriterProcess(
            [
                *("--lakehouse", str(lake), "--checkpoint", str(checkpoint)),
                *("--topics", f"{topic}|_commits|_execution_log", "--trigger-interval", "1"),
                *("--max-offsets-per-trigger", "300"),  # the burst takes several batches
                *("--bootstrap-servers", kafka_bootstrap),
            ],
            {
                "LAKEHOUSE_METRICS_PORT": str(port),
                "LAKEHOUSE_METRICS_HOST": "127.0.0.1",
                "LAKEHOUSE_MONITOR_GROUP": "off",
            },
            work / "writer.log",
            str(checkpoint),
        )
        try:
            wait_until(
                "the writer running",
                lambda: (writer.status() or {}).get("state") == "running",
                300,
                1,
            )
            _feed(topic, schemas, kafka_bootstrap, mp)
            wait_until("every run applied", lambda: _applied(lake, function), 300, 1)
            settings = LakehouseSettings(
                LAKEHOUSE_PATH=str(lake), LAKEHOUSE_CHECKPOINT_PATH=str(checkpoint)
            )
            auth = Authenticator.from_settings(
                FUNCTION_NAME, AuthSettings(function_keys=json.dumps({FUNCTION_NAME: KEY}))
            )
            with UiServer(Overview(settings, refresh_s=2).document, auth) as ui:
                url = f"http://127.0.0.1:{ui.port}"
                yield Stack(
                    work, lake, checkpoint, topic, kafka_bootstrap, function, writer, port, url
                )
        finally:
            if writer.proc.poll() is None:
                writer.proc.send_signal(signal.SIGTERM)
                try:
                    writer.wait(120)
                except subprocess.TimeoutExpired:
                    writer.kill9()
            for future in kafka_admin.delete_topics([topic, schemas]).values():
                future.result(timeout=30)


_READ_DOM = """
const cells = (tr) => Object.fromEntries([...tr.querySelectorAll('[data-field]')].map((td) => [
  td.dataset.field,
  {
    text: td.textContent,
    seconds: td.dataset.seconds ?? null,
    time: td.querySelector('time')?.dateTime ?? null,
  },
]));
const rows = (id) => [...document.querySelectorAll(`#${id} tbody tr`)]
  .map((tr) => ({...tr.dataset, cells: cells(tr)}));
return {
  generated: document.body.dataset.generatedAt,
  writer: document.getElementById('writer').dataset.state,
  tables: rows('tables'), runs: rows('runs'), rejected: rows('rejected'),
  topics: [...document.querySelectorAll('#topics section')].map((s) => ({
    topic: s.dataset.topic,
    plots: [...s.querySelectorAll('figure')].map((f) => ({
      plot: f.dataset.plot,
      label: f.querySelector('svg').getAttribute('aria-label'),
      path: f.querySelector('path.series')?.getAttribute('d') ?? '',
    })),
  })),
};
"""


def _page(driver: Any, stack: Stack) -> dict[str, Any]:
    """The page's DOM once it shows the flow's last run and the table's every row."""

    def ready() -> dict[str, Any] | None:
        dom = driver.execute_script(_READ_DOM)
        mine = [r for r in dom["runs"] if r["cells"]["function"]["text"] == stack.function]
        table = [t for t in dom["tables"] if t.get("table") == TABLE]
        return dom if len(mine) == DELTAS + 2 and table and dom["topics"] else None

    return wait_until("the page showing the flow's runs", ready, 60)


@pytest.mark.browser
def test_the_page_shows_what_the_system_tables_hold(stack):
    with chromium(1280, 1000) as driver:
        driver.get(f"{stack.ui}/?code={KEY}")
        dom = _page(driver, stack)
        full_page_screenshot(driver, SCREENSHOT)

    assert dom["writer"] == "running"
    # Tables: rows and newest change by full scans, the version from the Delta log.
    assert sorted(t["table"] for t in dom["tables"]) == ["SHOP.ORDERS", TABLE]
    generated = datetime.fromisoformat(dom["generated"])
    for name, expected in ((TABLE, 10 + 5 * DELTAS), ("SHOP.ORDERS", BURST)):
        path = stack.lake.joinpath(*name.split("."))
        scan = _scan(path, "SELECT count(*) AS n, max(__change_time) AS newest FROM t")[0]
        (row,) = [t["cells"] for t in dom["tables"] if t["table"] == name]
        assert int(row["rows"]["text"].replace(",", "")) == scan["n"] == expected
        assert int(row["version"]["text"]) == DeltaTable(str(path)).version()
        shown = datetime.fromisoformat(row["newest"]["time"])  # statistics hold milliseconds
        assert shown == scan["newest"].replace(
            microsecond=scan["newest"].microsecond // 1000 * 1000
        )
        freshness = float(row["freshness"]["seconds"])
        assert freshness == pytest.approx((generated - shown).total_seconds(), abs=0.01)
        assert row["stopped"]["text"] == "no"

    # Runs: the latest record of each of the flow's runs in _execution_log.
    runs = _scan(
        stack.lake / "_execution_log",
        f"""SELECT run_id, status, "rows", error FROM (SELECT *, row_number() OVER (
              PARTITION BY run_id ORDER BY kafka_offset DESC) AS k FROM t
            WHERE function_name = '{stack.function}') WHERE k = 1""",
    )
    page_runs = {
        r["run"]: r["cells"]
        for r in dom["runs"]
        if r["cells"]["function"]["text"] == stack.function
    }
    assert set(page_runs) == {r["run_id"] for r in runs}
    for run in runs:
        cells = page_runs[run["run_id"]]
        assert cells["status"]["text"] == run["status"]
        assert int(cells["rows"]["text"].replace(",", "")) == sum(n for _, n in run["rows"] or [])
        assert cells["error"]["text"] == (run["error"] or "")[:2000]
        assert cells["duration"]["seconds"] is not None
    failed = [r for r in runs if r["status"] == "FAILED"]
    assert len(failed) == 1 and "RuntimeError: source went away" in failed[0]["error"]

    # Rejected rows: per table and reason, counted by a GROUP BY of _rejected.
    groups = _scan(
        stack.lake / "_rejected", 'SELECT "table", error, count(*) AS n FROM t GROUP BY 1, 2'
    )
    assert groups and {(g["table"] or "", g["error"], g["n"]) for g in groups} == {
        (r["table"], r["reason"], int(r["cells"]["rows"]["text"])) for r in dom["rejected"]
    }
    assert all(f"{stack.topic} [" in r["cells"]["sample"]["text"] for r in dom["rejected"])

    # Topics: a lag plot and a throughput plot, each with a line over the last hour.
    (topic,) = [t for t in dom["topics"] if t["topic"] == stack.topic]
    assert [p["plot"] for p in topic["plots"]] == ["lag", "rows_per_s"]
    for plot in topic["plots"]:
        assert plot["path"].startswith("M") and " points over the last " in plot["label"]
    assert SCREENSHOT.stat().st_size > 20_000


_CONTRAST = """
const lum = (rgb) => {
  const [r, g, b] = rgb.map((c) => {
    c /= 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
};
const rgba = (text) => (text.match(/[\\d.]+/g) || []).map(Number);
const background = (node) => {
  for (let n = node; n; n = n.parentElement) {
    const c = rgba(getComputedStyle(n).backgroundColor);
    if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
  }
  return [255, 255, 255];
};
const worst = [];
for (const node of document.querySelectorAll('body *')) {
  const own = [...node.childNodes].some((c) => c.nodeType === 3 && c.textContent.trim());
  if (!own || node.closest('[hidden]') || node.offsetParent === null) continue;
  const style = getComputedStyle(node);
  const [a, b] = [lum(rgba(style.color).slice(0, 3)), lum(background(node))];
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  const size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
  const large = size >= 24 || (bold && size >= 18.66);
  const text = node.textContent.trim().slice(0, 40);
  if (ratio < (large ? 3 : 4.5)) worst.push([node.tagName, text, ratio.toFixed(2)]);
}
return worst;
"""


@pytest.mark.browser
def test_keyboard_and_screen_reader_basics(stack):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    with chromium(1280, 900) as driver:
        driver.get(f"{stack.ui}/?code={KEY}")
        _page(driver, stack)
        # Landmarks, headings, labelled controls and plots, headers with their scope.
        for landmark in ("header", "main", "footer"):
            assert driver.find_elements(By.TAG_NAME, landmark), landmark
        assert driver.find_element(By.TAG_NAME, "h1").text == "Lakehouse writer"
        assert driver.find_element(By.ID, "auto").find_element(By.XPATH, "..").tag_name == "label"
        headers = driver.find_elements(By.CSS_SELECTOR, "thead th")
        assert headers and all(h.get_attribute("scope") == "col" for h in headers)
        for svg in driver.find_elements(By.CSS_SELECTOR, "svg.plot"):
            assert svg.get_attribute("role") == "img" and svg.get_attribute("aria-label")
        assert driver.find_element(By.CSS_SELECTOR, "html").get_attribute("lang") == "en"
        # Every text meets WCAG AA contrast against what is behind it.
        assert driver.execute_script(_CONTRAST) == []
        # Focus order: skip link, Refresh, the auto-refresh switch, then the scrollable tables.
        body = driver.find_element(By.TAG_NAME, "body")
        body.send_keys(Keys.TAB)
        order = []
        for _ in range(5):
            active = driver.switch_to.active_element
            order.append(
                active.get_attribute("id") or active.get_attribute("class") or active.tag_name
            )
            active.send_keys(Keys.TAB)
        assert order[:3] == ["skip", "refresh", "auto"], order
        assert order[3:] == ["scroll", "scroll"], order
        # The switch works from the keyboard: Space turns the refreshing off.
        switch = driver.find_element(By.ID, "auto")
        switch.send_keys(Keys.SPACE)
        assert not switch.is_selected()
        # Enter on the skip link moves the focus into the main content.
        driver.find_element(By.CLASS_NAME, "skip").send_keys(Keys.ENTER)
        assert driver.switch_to.active_element.get_attribute("id") == "main"


def _fast_rules(tmp: Path) -> Path:
    """The shipped rules with every ``for:`` at 2 s (the expressions unchanged)."""
    text = (REPO / "deploy" / "prometheus" / "lakehouse-writer-rules.yml").read_text()
    fast = re.sub(r"^(\s+for: )\S+$", r"\g<1>2s", text, flags=re.MULTILINE)
    assert fast != text
    path = tmp / "rules.yml"
    path.write_text(fast)
    return path


def _dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel target, the dashboard's variables filled in."""
    dashboard = json.loads((REPO / "deploy" / "grafana" / "lakehouse-writer.json").read_text())
    return [
        (
            panel["title"],
            target["expr"].replace("$__rate_interval", "1m").replace("$instance", ".*"),
        )
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]


def _firing(prom: PrometheusServer, name: str) -> list[dict[str, Any]]:
    return [
        a
        for a in prom.api("alerts")["alerts"]
        if a["labels"]["alertname"] == name and a["state"] == "firing"
    ]


@pytest.mark.prometheus
def test_prometheus_scrapes_the_writer_and_an_alert_fires_when_it_stops(stack, tmp_path):
    promtool = need("promtool")
    rules = _fast_rules(tmp_path)
    checked = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    port = free_port_block(1)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{json.dumps(str(rules))}]\n"
        "scrape_configs:\n"
        "  - job_name: lakehouse-writer\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{stack.metrics_port}']}}]\n"
    )
    with PrometheusServer(config, port, tmp_path / "data", tmp_path / "prometheus.log") as prom:
        selector = f'{{job="lakehouse-writer",table="{TABLE}"}}'
        wait_until(
            "the writer scraped",
            lambda: prom.query(f"lakehouse_writer_rows_applied_total{selector}"),
            60,
        )
        # What Prometheus holds is what the writer serves.
        import urllib.request

        with urllib.request.urlopen(
            f"http://127.0.0.1:{stack.metrics_port}/metrics", timeout=10
        ) as got:
            direct = samples(got.read().decode())
        held = float(prom.query(f"lakehouse_writer_rows_applied_total{selector}")[0]["value"][1])
        assert held == direct[f'lakehouse_writer_rows_applied_total{{table="{TABLE}"}}'] > 0
        newest = _scan(stack.lake / "TEST" / "NUMBERS", "SELECT max(__change_time) AS t FROM t")[0][
            "t"
        ]
        fresh = float(
            prom.query(f"lakehouse_writer_table_last_change_timestamp_seconds{selector}")[0][
                "value"
            ][1]
        )
        assert fresh == pytest.approx(newest.timestamp(), abs=0.001)
        # Every panel of the dashboard queries without error; the main ones show data.
        for title, expr in _dashboard_queries():
            result = prom.query(expr)
            if title in ("Writer up", "Lag per topic", "Freshness per table", "Stopped tables"):
                assert result, f"{title}: {expr}"
        # Rows rejected while Prometheus watches fire that alert (the writer runs on).
        junk = [(stack.topic, b"k", b"more junk")]
        produce_transaction(stack.bootstrap, stack.topic, sample_schema(), [], extra=junk)
        wait_until(
            "LakehouseWriterRowsRejected firing",
            lambda: _firing(prom, "LakehouseWriterRowsRejected"),
            60,
        )
        assert not _firing(prom, "LakehouseWriterDown")

        stack.writer.proc.send_signal(signal.SIGTERM)
        assert stack.writer.wait(120) == 0, stack.writer.tail()
        stopped_at = time.monotonic()
        (alert,) = wait_until(
            "LakehouseWriterDown firing", lambda: _firing(prom, "LakehouseWriterDown"), 60
        )
        assert alert["labels"]["instance"] == f"127.0.0.1:{stack.metrics_port}"
        assert alert["labels"]["severity"] == "critical"
        print(f"LakehouseWriterDown fired {time.monotonic() - stopped_at:.1f} s after the stop")
    assert datetime.now(UTC) > datetime.fromisoformat(alert["activeAt"].replace("Z", "+00:00"))
