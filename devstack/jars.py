"""Resolve the project's JVM dependencies with Maven into a cache folder.

The dependency list is ``devstack/pom.xml`` (profiles ``broker`` and ``spark``). Resolution runs
``mvn dependency:copy-dependencies`` once; a stamp holding the pom's hash makes later calls free
until the pom changes. Spark gets its jars through ``spark.jars`` (:func:`spark_jars`), never
through Ivy ``packages``.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
from pathlib import Path

from devstack import paths, tools
from devstack.errors import DevstackError

log = logging.getLogger(__name__)

PROFILES = ("broker", "spark", "registry")
DEFAULT_PROFILES = ("broker", "spark")  # what `devstack jars` and the tests need


def jar_dir(profile: str) -> Path:
    """Return the folder holding the resolved jars of ``profile``, resolving them if needed."""
    if profile not in PROFILES:
        raise ValueError(f"unknown jar profile {profile!r}; expected one of {PROFILES}")
    target = paths.home() / "jars" / profile
    stamp = target / ".pom-sha256"
    wanted = hashlib.sha256(paths.POM.read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text().strip() == wanted:
        return target
    _resolve(profile, target)
    if profile == "spark":
        _drop_jars_pyspark_ships(target)
    stamp.write_text(wanted + "\n")
    return target


def broker_classpath() -> str:
    """Return the ``java -cp`` value that runs the Kafka broker."""
    return str(jar_dir("broker") / "*")


def spark_jars() -> list[str]:
    """Return the Kafka, Avro and Delta connector jars for ``spark.jars``."""
    return sorted(str(p) for p in jar_dir("spark").glob("*.jar"))


def _resolve(profile: str, target: Path) -> None:
    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [
        tools.maven(), "-q", "-B", "-f", str(paths.POM), "-P", profile,
        "dependency:copy-dependencies", f"-DoutputDirectory={staging}",
    ]  # fmt: skip
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


def _drop_jars_pyspark_ships(target: Path) -> None:
    """Remove jars whose artifact pyspark already has: two versions on one classpath clash."""
    try:
        import pyspark
    except ImportError:  # pragma: no cover - pyspark is a dependency of the project
        return
    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    for jar in target.glob("*.jar"):
        if _artifact(jar.name) in shipped:
            log.info("dropping %s: pyspark ships that artifact", jar.name)
            jar.unlink()


def _artifact(file_name: str) -> str:
    """``kafka-clients-3.9.1.jar`` -> ``kafka-clients`` (strip the version)."""
    stem = file_name.removesuffix(".jar")
    parts = stem.split("-")
    for i, part in enumerate(parts):
        if part[:1].isdigit():
            return "-".join(parts[:i])
    return stem
