"""A virtual environment per Spark line, to run the tests on another Spark line by hand.

The writer runs on three Spark lines (:mod:`lakehouse_writer.runtime.lines`); the main venv
(``make install``) has the default one. :func:`environment` builds the others under
``.devstack/compat/spark-<line>/`` (``DEVSTACK_HOME``): a venv of the line's Python with this
repository installed editable with its ``dev`` extra, at constraints.txt's versions except for
the line's own pins (``constraints-spark35.txt``, ``constraints-spark40.txt``: pyspark,
delta-spark, py4j), and the line's JVM jars resolved by Maven into the writer's folder of
that line (``~/.cache/flow-platform/jars/spark-<line>``). A stamp holding the hash of
what went in makes a second call free until pyproject.toml or a constraints file changes.
pip's cache makes a rebuild take about a minute.

    devstack compat 3.5        build (if needed) and print the venv's python
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from devstack import paths
from devstack.errors import DevstackError

__all__ = ["COMPAT_LINES", "CompatEnv", "environment", "merged_constraints"]

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
# Line -> (constraints file of its pins, the Python versions to look for, best first): each
# line's platform runs that Python (Fabric 1.3: 3.11; Fabric 2.0: 3.12). Where none is found,
# the Python running this (3.11 here) builds it; pyspark 4.0 supports 3.9-3.13.
COMPAT_LINES: dict[str, tuple[str, tuple[str, ...]]] = {
    "3.5": ("constraints-spark35.txt", ("3.11",)),
    "4.0": ("constraints-spark40.txt", ("3.12", "3.11")),
}
_PIP_TIMEOUT_S = 1200


@dataclass(frozen=True)
class CompatEnv:
    """A built environment of one line."""

    line: str
    root: Path

    @property
    def python(self) -> Path:
        """The venv's interpreter."""
        return self.root / "bin" / "python"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment a process of this line runs with (``base``: ``os.environ``)."""
        made = dict(os.environ if base is None else base)
        made.pop("LAKEHOUSE_JARS_DIR", None)  # a folder of another line's jars
        made["VIRTUAL_ENV"] = str(self.root)
        made["PATH"] = f"{self.root / 'bin'}{os.pathsep}{made.get('PATH', '')}"
        for name in ("PYTHONPATH", "SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
            made.pop(name, None)  # the main venv's would win over this one's pyspark
        return made


def environment(line: str) -> CompatEnv:
    """The environment of ``line``, built (venv, packages, jars) unless it is current.

    Raises:
        DevstackError: An unknown line, or pip or Maven failed (their output in the message).
    """
    if line not in COMPAT_LINES:
        raise DevstackError(
            f"no compat environment for Spark {line}; known: {sorted(COMPAT_LINES)}"
        )
    pins_file, pythons = COMPAT_LINES[line]
    python = _python(pythons)
    constraints = merged_constraints(
        (REPO / "constraints.txt").read_text(), (REPO / pins_file).read_text()
    )
    wanted = hashlib.sha256(
        "\n".join([python, constraints, (REPO / "pyproject.toml").read_text()]).encode()
    ).hexdigest()
    built = CompatEnv(line, paths.home() / "compat" / f"spark-{line}")
    stamp = built.root / ".stamp"
    if not (stamp.is_file() and stamp.read_text().strip() == wanted):
        _build(built, python, constraints)
        stamp.write_text(wanted + "\n")
    _resolve_jars(built)
    return built


def merged_constraints(base: str, pins: str) -> str:
    """``base`` (constraints.txt) with the names ``pins`` pins replaced by ``pins``' lines.

    pip refuses two constraints on one name that disagree, so they cannot both be given.
    """
    pinned = {_name(line) for line in pins.splitlines() if _name(line)}
    kept = [line for line in base.splitlines() if _name(line) not in pinned]
    added = [line for line in pins.splitlines() if _name(line)]
    return "\n".join([*kept, *added]) + "\n"


def _name(line: str) -> str:
    """The normalized package name of a requirement line; ``""`` for comments and blanks."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line.split("#", 1)[0])
    return re.sub(r"[-_.]+", "-", found.group(1)).lower() if found else ""


def _python(versions: tuple[str, ...]) -> str:
    """The first interpreter of ``versions`` found (PATH, then pyenv's), else this one."""
    for version in versions:
        candidates = [shutil.which(f"python{version}") or ""]
        pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
        candidates += sorted(str(p) for p in pyenv.glob(f"{version}.*/bin/python{version}"))
        for candidate in filter(None, candidates):
            done = subprocess.run([candidate, "--version"], capture_output=True, check=False)
            if done.returncode == 0:
                return candidate
    log.info("no Python %s found; building with %s", " or ".join(versions), sys.executable)
    return sys.executable


def _build(built: CompatEnv, python: str, constraints: str) -> None:
    """Create the venv anew and install this repository (editable, ``dev``) into it."""
    log.info("building the Spark %s environment in %s with %s", built.line, built.root, python)
    shutil.rmtree(built.root, ignore_errors=True)
    _run([python, "-m", "venv", str(built.root)], "venv")
    (built.root / "constraints.txt").write_text(constraints)
    _run([str(built.python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], "pip")
    _run(
        [
            str(built.python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "-c",
            str(built.root / "constraints.txt"),
            "-e",
            f"{REPO}[dev]",
        ],
        "pip install",
    )
    # As `make install` does: this repository (flows/, devstack/, tests/) on the venv's path.
    purelib = subprocess.run(
        [str(built.python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "flow_platform_repo.pth").write_text(f"{REPO}\n")


def _resolve_jars(built: CompatEnv) -> None:
    """Resolve the line's jars as the writer does, with the venv's pyspark (no-op if current)."""
    _run(
        [str(built.python), "-c", "from lakehouse_writer.runtime import jars; jars.jar_dir()"],
        "jars",
        env=built.env(),
    )


def _run(command: list[str], what: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, env=env, check=False
    )
    if done.returncode != 0:
        raise DevstackError(f"{what} failed ({' '.join(command[:4])} ...): {done.stderr[-3000:]}")
