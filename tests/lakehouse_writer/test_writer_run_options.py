"""Where ``lakehouse-writer run`` takes its master, settings and jars from; Connect refused.

No broker and no Spark session here (``test_spark_submit.py`` runs the same under a real
``spark-submit``).
"""

from __future__ import annotations

import shutil

import pytest
from pyspark import SparkContext

from lakehouse_writer.cli import _parser, main, run_command
from lakehouse_writer.errors import WriterFailed
from lakehouse_writer.runtime import jars
from lakehouse_writer.runtime.session import resolve_master
from lakehouse_writer.runtime.status import read_status
from lakehouse_writer.settings import LakehouseSettings
from producer_lib.errors import ConfigError


@pytest.fixture
def no_session(monkeypatch):
    """As in a fresh process: no SparkContext (another test file may have started one)."""
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)


@pytest.mark.parametrize(
    ("given", "env", "spark_master", "expected"),
    [
        (None, {}, None, "local[2]"),
        ("spark://h:7077", {}, "local[4]", "spark://h:7077"),
        (None, {}, "yarn", "yarn"),
        (None, {"PYSPARK_GATEWAY_PORT": "41999"}, "local[4]", None),
        ("env", {}, None, None),
    ],
    ids=["default", "given-wins", "SPARK_MASTER", "spark-submit", "env"],
)
def test_the_master_comes_from_the_first_place_that_names_one(
    no_session, monkeypatch, tmp_path, given, env, spark_master, expected
):
    monkeypatch.chdir(tmp_path)  # no stray .env
    if spark_master is None:
        monkeypatch.delenv("SPARK_MASTER", raising=False)
    else:
        monkeypatch.setenv("SPARK_MASTER", spark_master)
    configured = LakehouseSettings().spark_master
    assert resolve_master(given, env, configured) == expected


def test_a_master_in_spark_defaults_is_left_to_spark(no_session, tmp_path):
    (tmp_path / "spark-defaults.conf").write_text("# ours\nspark.master   spark://h:7077\n")
    assert resolve_master(None, {"SPARK_CONF_DIR": str(tmp_path)}) is None
    (tmp_path / "spark-defaults.conf").write_text("spark.executor.memory 2g\n")
    assert resolve_master(None, {"SPARK_CONF_DIR": str(tmp_path)}) == "local[2]"


def test_conf_and_jars_arguments(capsys):
    args = _parser().parse_args(
        ["run", "--conf", "spark.a=1", "--conf", "fs.key=x=y", "--jars", "a.jar, b.jar"]
    )
    assert dict(args.conf) == {"spark.a": "1", "fs.key": "x=y"} and args.jars == ["a.jar", "b.jar"]
    with pytest.raises(SystemExit) as raised:
        _parser().parse_args(["run", "--conf", "secret-value-9c1"])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert "KEY=VALUE" in err and "secret-value-9c1" not in err


def test_spark_connect_is_refused_before_spark_starts(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.setenv("SPARK_REMOTE", "sc://h:443/;token=tok-5e1d")
    checkpoint = tmp_path / "ckpt"
    argv = ["run", "--lakehouse", str(tmp_path / "lake"), "--checkpoint", str(checkpoint)]
    with pytest.raises(WriterFailed, match="SparkConnectUnsupported: SPARK_REMOTE .*classic"):
        run_command(argv)  # what a Databricks wheel task sees: an exception
    assert main(argv) == 1  # what a shell sees
    status = read_status(str(checkpoint)) or {}
    assert status["state"] == "failed" and "SPARK_REMOTE" in status["error"]
    shown = capsys.readouterr().err + caplog.text + (checkpoint / "writer_error.log").read_text()
    assert "tok-5e1d" not in shown + str(status)


def test_a_bad_setting_raises_for_a_library_caller_and_exits_2_for_a_shell(monkeypatch):
    monkeypatch.setenv("LAKEHOUSE_RELOAD_ONE_PASS_MIN_ROWS", "-1")
    with pytest.raises(ConfigError, match="LAKEHOUSE_RELOAD_ONE_PASS_MIN_ROWS"):
        run_command(["run"])
    assert main(["run"]) == 2


@pytest.fixture
def cached_jars():
    """The connector jars of the Maven cache (resolved once by the Spark tests' setup)."""
    found = sorted(jars.default_dir().glob("*.jar"))
    if not found:
        pytest.skip("connector jars not resolved yet (run a Spark test first)")
    return found


def test_jars_given_or_on_the_classpath_spare_maven(cached_jars, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn: asking Maven would fail
    monkeypatch.setenv(jars.JARS_DIR_VARIABLE, str(tmp_path / "none"))
    assert jars.local_jars(["/x/a.jar"]) == ["/x/a.jar"]
    assert jars.local_jars(class_path=f"{cached_jars[0].parent}/*") == []  # production image
    by_hand = tmp_path / "by-hand"
    by_hand.mkdir()
    for jar in cached_jars:
        shutil.copy(jar, by_hand)
    monkeypatch.setenv(jars.JARS_DIR_VARIABLE, str(by_hand))  # filled by hand: no stamp
    assert jars.local_jars() == [str(by_hand / j.name) for j in cached_jars]
    monkeypatch.setenv(jars.JARS_DIR_VARIABLE, str(tmp_path / "none"))
    with pytest.raises(jars.JarsUnavailable, match="Maven"):
        jars.local_jars()  # nothing anywhere: Maven, the last resort
