"""Resolve the project's JVM dependencies with Maven into a cache folder.

The broker's and the registry's dependencies are ``devstack/pom.xml`` (profiles ``broker`` and
``registry``). Resolution runs ``mvn dependency:copy-dependencies`` once; a stamp holding the
pom's hash makes later calls free until the pom changes. The ``spark`` profile is the writer's
own: :mod:`lakehouse_writer.runtime.jars` holds those coordinates (an installed writer resolves them
without this repository) and its folder (``LAKEHOUSE_JARS_DIR``, else
``~/.cache/flow-platform/jars/spark``) is the one devstack reports. Spark gets its jars through
``spark.jars`` (:func:`spark_jars`), never through Ivy ``packages``.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
from pathlib import Path

from devstack import paths, tools
from devstack.errors import DevstackError
from lakehouse_writer.runtime import jars as writer_jars

log = logging.getLogger(__name__)

PROFILES = ("broker", "spark", "registry")
DEFAULT_PROFILES = ("broker", "spark")  # what `devstack jars` and the tests need


def jar_dir(profile: str) -> Path:
    """Return the folder holding the resolved jars of ``profile``, resolving them if needed."""
    if profile not in PROFILES:
        raise ValueError(f"unknown jar profile {profile!r}; expected one of {PROFILES}")
    if profile == "spark":
        return writer_jars.jar_dir()
    target = paths.home() / "jars" / profile
    stamp = target / ".pom-sha256"
    wanted = hashlib.sha256(paths.POM.read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text().strip() == wanted:
        return target
    _resolve(profile, target)
    stamp.write_text(wanted + "\n")
    return target


def broker_classpath() -> str:
    """Return the ``java -cp`` value that runs the Kafka broker."""
    return str(jar_dir("broker") / "*")


def spark_jars() -> list[str]:
    """Return the Kafka, Avro and Delta connector jars for ``spark.jars``."""
    return writer_jars.spark_jars()


def _resolve(profile: str, target: Path) -> None:
    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [
        tools.maven(),
        "-q",
        "-B",
        "-f",
        str(paths.POM),
        "-P",
        profile,
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
    ]
    log.info("resolving %s jars with Maven into %s", profile, target)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        errors = [line for line in done.stdout.splitlines() if "ERROR" in line][:5]
        raise DevstackError(
            f"Maven could not resolve the {profile!r} jars of {paths.POM}:\n"
            + "\n".join(errors or [done.stderr.strip()])
        )
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
