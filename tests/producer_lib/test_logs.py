"""LOG_FORMAT and LOG_LEVEL: the lines a log shipper reads (producer_lib.logs).

The configuration of the root logger is tried in a fresh interpreter each time (a test
runner's own logging would otherwise be what is configured).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from producer_lib.logs import JsonFormatter, context_of, say_error

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("message", "context"),
    [
        (
            "run completed flow=cities run_id=b7be rows={'GEO.CITIES': 4}",
            {"flow": "cities", "run_id": "b7be"},
        ),
        ("batch done batch=12 rows={'GEO.CITIES': 4} rejected=0", {"batch": 12}),
        ("small merge table=GEO.CITIES, rows=3", {"table": "GEO.CITIES"}),
        ("table GEO.X is not stopped [table='GEO.X' lakehouse='/l']", {"table": "GEO.X"}),
        ("first wins table=A.B table=C.D", {"table": "A.B"}),
        ("no context: subtable=A.B rows=3 partition_count=2", {}),
        (
            "offsets topic=orders partition=0 offset=-1",
            {"topic": "orders", "partition": 0, "offset": -1},
        ),
    ],
    ids=["flow-run", "batch-int", "trailing-comma", "context-error", "first", "none", "numbers"],
)
def test_context_comes_from_the_key_value_pairs_of_the_message(message, context):
    assert context_of(message) == context


def _record(message: str, level: int = logging.INFO, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("producer_lib.runner", level, __file__, 1, message, (), exc_info)


def test_a_json_line_has_time_level_logger_message_and_context():
    line = json.loads(JsonFormatter().format(_record("run completed flow=cities run_id=9f")))
    assert line.pop("timestamp").endswith("Z")  # UTC, ISO 8601, milliseconds
    assert line == {
        "level": "INFO",
        "logger": "producer_lib.runner",
        "message": "run completed flow=cities run_id=9f",
        "flow": "cities",
        "run_id": "9f",
    }


def test_an_exception_travels_in_the_same_line():
    try:
        raise ValueError("bad value in column AMOUNT\nsecond line")
    except ValueError:
        record = _record("load failed table=SHOP.ORDERS", logging.ERROR, sys.exc_info())
    text = JsonFormatter().format(record)
    assert "\n" not in text  # one line a record, whatever the trace
    line = json.loads(text)
    assert line["exception"]["type"] == "ValueError"
    assert line["exception"]["message"] == "bad value in column AMOUNT\nsecond line"
    assert "Traceback" in line["exception"]["trace"] and line["table"] == "SHOP.ORDERS"


def _fresh(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a new interpreter, with the LOG_* variables of ``env`` only."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LOG_")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**clean, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


LOGS_A_FEW = """
    import logging
    from producer_lib.logs import configure_logging
    configure_logging("INFO")
    logging.getLogger("flows.orders").debug("debug line table=A.B")
    logging.getLogger("flows.orders").info("info line table=A.B")
    logging.getLogger("flows.orders").warning("warning line table=A.B")
    logging.getLogger("py4j.clientserver").info("py4j chatter")
"""


def test_text_by_default_at_info():
    done = _fresh(LOGS_A_FEW)
    lines = done.stderr.splitlines()
    assert [line.split(" ", 3)[2:] for line in lines] == [
        ["INFO", "flows.orders info line table=A.B"],
        ["WARNING", "flows.orders warning line table=A.B"],
    ], done.stderr


def test_json_lines_at_the_level_asked_for():
    done = _fresh(LOGS_A_FEW, LOG_FORMAT="json", LOG_LEVEL="debug")
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(line["level"], line["message"]) for line in lines] == [
        ("DEBUG", "debug line table=A.B"),
        ("INFO", "info line table=A.B"),
        ("WARNING", "warning line table=A.B"),
    ]  # py4j's INFO chatter stays out even at DEBUG
    assert {line["table"] for line in lines} == {"A.B"}


def test_a_bad_setting_names_its_variable():
    done = _fresh(LOGS_A_FEW, LOG_FORMAT="yaml")
    assert done.returncode == 1 and "ConfigError: invalid log settings: LOG_FORMAT" in done.stderr


HOSTED = """
    import logging, sys
    host = logging.StreamHandler(sys.stdout)
    host.setFormatter(logging.Formatter("HOST %(message)s"))
    logging.getLogger().addHandler(host)
    logging.getLogger().setLevel(logging.WARNING)
    from producer_lib.logs import configure_logging
    configure_logging("INFO")
    logging.getLogger("flows.orders").warning("loaded table=A.B")
    print(len(logging.getLogger().handlers))
"""


def test_a_hosts_logging_stays_unless_a_format_or_level_is_asked_for():
    kept = _fresh(HOSTED)
    assert kept.stdout.splitlines() == ["HOST loaded table=A.B", "1"] and not kept.stderr
    asked = _fresh(HOSTED, LOG_FORMAT="json")
    first, count = asked.stdout.splitlines()
    assert json.loads(first)["table"] == "A.B" and count == "1"  # the host's handler, our format


def test_a_commands_error_is_one_line_in_either_format(monkeypatch, capsys):
    monkeypatch.delenv("LOG_FORMAT", raising=False)
    say_error("producer-lib", "invalid Kafka settings: KAFKA_BOOTSTRAP_SERVERS is not set")
    assert capsys.readouterr().err == (
        "producer-lib: invalid Kafka settings: KAFKA_BOOTSTRAP_SERVERS is not set\n"
    )
    monkeypatch.setenv("LOG_FORMAT", "json")
    say_error("lakehouse-writer", "no such table [table='SHOP.X']")
    line = json.loads(capsys.readouterr().err)
    assert (line["level"], line["logger"], line["table"]) == ("ERROR", "lakehouse-writer", "SHOP.X")
