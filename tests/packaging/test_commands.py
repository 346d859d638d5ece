"""Every command a user runs: ``--version``, ``--help`` written for users, JSON log lines.

The commands are this repository's console scripts (``.venv/bin``), run as processes: what a
user types. ``lakehouse-writer``'s JSON lines are checked by a writer run in
``tests/lakehouse_writer/test_writer_relative_paths.py`` (it needs Spark).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from lakehouse_writer.cli import run_command
from producer_lib._version import installed_version

BIN = Path(sys.executable).parent
COMMANDS = ["producer-lib", "lakehouse-writer", "devstack"]
# What a help text written for developers shows: docstring markup, internals.
DEVELOPER_TEXT = re.compile(r"``|:(?:func|mod|class|meth|attr):|::$|\bself\b|\bargv\b", re.M)
SUBCOMMANDS = {
    "producer-lib": ["run", "serve"],
    "lakehouse-writer": ["run", "status", "resume-table", "maintain"],
    "devstack": ["up", "down", "status", "env", "jars"],
}


def _run(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout=120):
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=timeout,
    )


def test_the_installed_version_comes_from_git():
    version = installed_version()
    assert version != "0+unknown", "flow-platform is not installed (make install)"
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+)?(\+[\w.]+)?", version), version
    assert version != "0.0.0", "installed from a tree without git metadata"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_says_its_version(command):
    done = _run(command, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{command} {installed_version()}\n"


def test_the_databricks_task_entry_point_says_its_version_too(capsys):
    with pytest.raises(SystemExit) as raised:
        run_command(["--version"])
    assert raised.value.code == 0
    assert capsys.readouterr().out == f"lakehouse-writer {installed_version()}\n"


@pytest.mark.slow  # a process per subcommand: 14 s in all
@pytest.mark.parametrize("command", COMMANDS)
def test_help_is_written_for_users(command):
    top = _run(command, "--help")
    assert top.returncode == 0, top.stderr
    assert not DEVELOPER_TEXT.search(top.stdout), top.stdout
    assert "examples:" in top.stdout and "LOG_FORMAT=json" in top.stdout
    for sub in SUBCOMMANDS[command]:
        assert re.search(rf"^    {re.escape(sub)}\s+[a-z]", top.stdout, re.M), f"{sub} unexplained"
        done = _run(command, sub, "--help")
        assert done.returncode == 0, done.stderr
        assert not DEVELOPER_TEXT.search(done.stdout), done.stdout
        description = done.stdout.split("\n\n")[1]  # after usage: a sentence about the command
        assert description[0].isupper() and description.rstrip().endswith("."), done.stdout
        undocumented = re.findall(r"^  (--[\w-]+)(?: \S+)?$\n(?!   )", done.stdout, re.M)
        assert not undocumented, f"{command} {sub}: options without help: {undocumented}"


def _json_lines(stderr: str) -> list[dict]:
    parsed = []
    for line in filter(str.strip, stderr.splitlines()):  # every line: a JSON object
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON line: {line!r} in:\n{stderr}")
    for line in parsed:
        assert {"timestamp", "level", "logger", "message"} <= line.keys(), line
    return parsed


FLOW = textwrap.dedent("""
    import os
    from producer_lib import FunctionRunner, KeySchema, RowType, create_key_row, create_truncate_row

    class CitiesFlow(FunctionRunner):
        function_name = os.environ["CITIES_FUNCTION"]
        source_system = "GEO"

        async def initial_load(self, producer, reader):
            sql = "select * from (values (1, 'Oslo'), (2, 'Lima')) t(city_id, name)"
            schema = await reader.load("CITIES", sql, "GEO", "GEO")
            schema.set_primary_keys("city_id")
            target = producer.add_target(os.environ["CITIES_TOPIC"], "CITIES", KeySchema(schema),
                                         schema)
            truncate = create_truncate_row(schema, None)
            producer.produce_row(target, create_key_row(truncate, target.key_schema), truncate,
                                 RowType.TRUNCATE, partition=0)
            producer.produce_from_duckdb("CITIES", target, 10_000, RowType.REPLACE)
            producer.commit()

        async def delta_load(self, producer, reader):
            await self.initial_load(producer, reader)
""")


@pytest.mark.kafka
def test_producer_lib_logs_json_lines_with_the_runs_context(tmp_path, kafka_bootstrap, new_topic):
    (tmp_path / "flow.py").write_text(FLOW)
    function = f"cities_{uuid.uuid4().hex[:8]}"
    env = {
        "LOG_FORMAT": "json",
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "CITIES_TOPIC": new_topic(),
        "CITIES_FUNCTION": function,
    }

    done = _run(
        "producer-lib", "run", "flow:CitiesFlow", "--load", "initial", env=env, cwd=tmp_path
    )

    assert done.returncode == 0, done.stderr
    lines = _json_lines(done.stderr)
    result = json.loads(done.stdout)  # stdout keeps the run's result, nothing else
    completed = [line for line in lines if line["message"].startswith("run completed")]
    assert completed and completed[0]["flow"] == function
    assert completed[0]["run_id"] == result["run_id"]


def test_producer_lib_reports_a_bad_setting_as_a_json_line(tmp_path):
    env = {
        "LOG_FORMAT": "json",
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "FLOW_ENVIRONMENT": "a b",  # a space: not a part of a transactional id
        "CITIES_FUNCTION": "cities",
        "CITIES_TOPIC": "cities",
    }
    (tmp_path / "flow.py").write_text(FLOW)
    done = _run(
        "producer-lib", "run", "flow:CitiesFlow", "--load", "initial", env=env, cwd=tmp_path
    )
    assert done.returncode != 0
    (line,) = _json_lines(done.stderr)
    assert line["level"] == "ERROR" and "FLOW_ENVIRONMENT" in line["message"]


def test_a_crash_in_a_flows_own_code_is_a_json_line_with_its_trace(tmp_path):
    (tmp_path / "flow.py").write_text(FLOW)  # CITIES_FUNCTION unset: a KeyError at import
    env = {"LOG_FORMAT": "json", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    done = _run(
        "producer-lib", "run", "flow:CitiesFlow", "--load", "initial", env=env, cwd=tmp_path
    )
    assert done.returncode == 1
    (line,) = _json_lines(done.stderr)
    assert line["level"] == "CRITICAL" and line["exception"]["type"] == "KeyError"
    assert "CITIES_FUNCTION" in line["exception"]["trace"]


def test_devstack_logs_json_lines_too(tmp_path):
    env = {"LOG_FORMAT": "json", "DEVSTACK_HOME": str(tmp_path)}
    done = _run("devstack", "env", "--secure", "--user", "flow-nobody", env=env)
    assert done.returncode == 1
    (line,) = _json_lines(done.stderr)
    assert line["logger"] == "devstack" and "no user 'flow-nobody'" in line["message"]
