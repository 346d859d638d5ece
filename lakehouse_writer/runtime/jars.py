"""The writer's JVM jars: Spark's Kafka source, Avro functions, Delta Lake and hadoop-azure.

The jars follow the running Spark line (:mod:`lakehouse_writer.runtime.lines`: 3.5, 4.0 or
4.1, read from ``pyspark.__version__``): the line's connectors, and ``hadoop-azure`` at the
version of the Hadoop the running pyspark ships (``abfss://`` and ``wasbs://`` paths), with the
jars it needs that pyspark lacks (:func:`coordinates`). The first run that starts its own
driver (a local master, or ``--master spark://HOST:PORT``: Spark ships them to the executors)
writes a pom of them, runs ``mvn dependency:copy-dependencies`` and keeps the jars in
:func:`jar_dir` (``LAKEHOUSE_JARS_DIR``, else ``~/.cache/flow-platform/jars/spark-<line>``). A
stamp holding the pom's hash makes later runs free until the coordinates change. Resolved with
Maven, never with Spark's Ivy ``spark.jars.packages``, which ignores Maven's ``settings.xml``
mirrors and proxies.

Each jar is listed without its transitive dependencies: Spark's parent POM names a repository
not reachable from every network, and pyspark already ships every other jar these need. Jars
whose artifact pyspark ships anyway are dropped after resolution (two versions of one artifact
on a classpath clash).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.runtime.lines import (
    Coordinate,
    SparkLine,
    current_line,
    hadoop_version,
    spark_jar_folders,
)

log = logging.getLogger(__name__)

# hadoop-azure (abfss://, wasbs://) and what it needs beyond pyspark's jars, by Hadoop version:
# hadoop-azure's own pom (mvn dependency:tree) less hadoop-shaded-guava and Guava, which
# pyspark's hadoop-client-runtime carries already (shaded).
_AZURE_DEPENDENCIES: dict[str, tuple[Coordinate, ...]] = {
    "3.3.4": (
        ("com.microsoft.azure", "azure-storage", "7.0.1"),
        ("com.microsoft.azure", "azure-keyvault-core", "1.0.0"),
        ("org.eclipse.jetty", "jetty-util-ajax", "9.4.43.v20210629"),
        ("org.eclipse.jetty", "jetty-util", "9.4.43.v20210629"),
        ("org.wildfly.openssl", "wildfly-openssl", "1.0.7.Final"),
        ("org.codehaus.jackson", "jackson-mapper-asl", "1.9.13"),
        ("org.codehaus.jackson", "jackson-core-asl", "1.9.13"),
    ),
    "3.4.1": (
        ("com.microsoft.azure", "azure-storage", "7.0.1"),
        ("com.microsoft.azure", "azure-keyvault-core", "1.0.0"),
        ("org.eclipse.jetty", "jetty-util-ajax", "9.4.53.v20231009"),
        ("org.eclipse.jetty", "jetty-util", "9.4.53.v20231009"),
        ("org.wildfly.openssl", "wildfly-openssl", "1.1.3.Final"),
    ),
    "3.4.2": (
        ("com.microsoft.azure", "azure-storage", "7.0.1"),
        ("com.microsoft.azure", "azure-keyvault-core", "1.0.0"),
        ("org.eclipse.jetty", "jetty-util-ajax", "9.4.57.v20241219"),
        ("org.eclipse.jetty", "jetty-util", "9.4.57.v20241219"),
        ("org.wildfly.openssl", "wildfly-openssl", "2.1.4.Final"),
    ),
}


JARS_DIR_VARIABLE = "LAKEHOUSE_JARS_DIR"
# A class of each connector the writer cannot run without: what a production image or a
# cluster must have when the writer does not bring the jars.
CONNECTOR_CLASSES = {
    "Kafka source (spark-sql-kafka-0-10)": "org.apache.spark.sql.kafka010.KafkaSourceProvider",
    "Avro functions (spark-avro)": "org.apache.spark.sql.avro.AvroDataToCatalyst",
    "Delta Lake (delta-spark)": "io.delta.sql.DeltaSparkSessionExtension",
}


def coordinates(line: SparkLine | None = None, hadoop: str | None = None) -> list[Coordinate]:
    """The jars the writer resolves: the line's connectors and hadoop-azure for its Hadoop.

    Args:
        line: The Spark line; None: the running one (``lines.current_line()``).
        hadoop: The Hadoop version; None: the one the running pyspark ships (else the line's).
    """
    line = line or current_line()
    return [*line.connectors, *hadoop_azure(hadoop or hadoop_version(line))]


def hadoop_azure(hadoop: str) -> tuple[Coordinate, ...]:
    """``hadoop-azure`` at ``hadoop`` and the jars it needs that pyspark does not ship.

    A Hadoop version not in the table gets the dependencies of the nearest one below it
    (else the oldest), logged: hadoop-azure must match Hadoop, its dependencies barely move.
    """
    known = sorted(_AZURE_DEPENDENCIES, key=_version_key)
    below = [v for v in known if _version_key(v) <= _version_key(hadoop)]
    chosen = below[-1] if below else known[0]
    if chosen != hadoop:
        log.info("hadoop-azure %s: taking the dependencies known for Hadoop %s", hadoop, chosen)
    return (("org.apache.hadoop", "hadoop-azure", hadoop), *_AZURE_DEPENDENCIES[chosen])


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


class JarsUnavailable(LakehouseWriterError):
    """The connector jars cannot be resolved (no Maven, or Maven failed)."""


def jar_dir(target: Path | None = None) -> Path:
    """Return the folder holding the connector jars, resolving them with Maven if needed.

    Args:
        target: The folder; None for ``LAKEHOUSE_JARS_DIR`` or the user's cache.

    Raises:
        JarsUnavailable: Maven is missing or could not resolve the jars.
    """
    target = target or default_dir()
    pom = pom_xml(coordinates())
    wanted = hashlib.sha256(pom.encode()).hexdigest()
    stamp = target / ".pom-sha256"
    if stamp.is_file() and stamp.read_text().strip() == wanted:
        return target
    _resolve(pom, target)
    (target / ".pom-sha256").write_text(wanted + "\n")
    return target


def spark_jars(target: Path | None = None) -> list[str]:
    """Return the connector jars for ``spark.jars`` (see :func:`jar_dir`)."""
    return sorted(str(p) for p in jar_dir(target).glob("*.jar"))


def local_jars(given: Sequence[str] | None = None, class_path: str = "") -> list[str]:
    """The ``spark.jars`` of a driver the writer starts: Maven only when nothing has them.

    The writer starts the driver with a local master and with a cluster's one given to it
    (``--master spark://HOST:PORT``); a cluster's executors get the jars from that driver.

    In this order: ``given`` (``--jars``) as they are; none when the driver's classpath will
    have the connectors already (:func:`on_class_path`: a production image with them in
    Spark's ``jars/`` or on ``spark.driver.extraClassPath``); the jars of a
    ``LAKEHOUSE_JARS_DIR`` filled by hand (no ``.pom-sha256`` stamp: nothing to check them
    against); else :func:`spark_jars` (the Maven cache, resolved on first use).

    Args:
        given: Jars named by the user; None or empty when none were.
        class_path: ``spark.driver.extraClassPath`` (entries separated by ``os.pathsep``).
    """
    if given:
        return list(given)
    if on_class_path(class_path):
        log.info("connector jars found on the driver's classpath; Maven not asked")
        return []
    explicit = os.environ.get(JARS_DIR_VARIABLE)
    if explicit and not (Path(explicit) / ".pom-sha256").exists():
        found = sorted(str(p) for p in Path(explicit).glob("*.jar"))
        if found:
            return found
    return spark_jars()


def on_class_path(class_path: str = "") -> bool:
    """True when a driver started here would have every connector without ``spark.jars``.

    Looks for the running line's connector jars (``SparkLine.connector_artifacts``) in the
    Spark distribution's ``jars/`` (``SPARK_HOME``, else pyspark's) and in ``class_path``
    (``spark.driver.extraClassPath``: jar files, folders, ``folder/*``).
    """
    names = {
        artifact_name(p.name)
        for folder in _class_path_folders(class_path)
        for p in folder.glob("*.jar")
    }
    names |= {
        artifact_name(Path(e).name) for e in class_path.split(os.pathsep) if e.endswith(".jar")
    }
    return all(artifact in names for artifact in current_line().connector_artifacts)


def _class_path_folders(class_path: str) -> list[Path]:
    """Folders whose jars a local driver loads: Spark's ``jars/`` and ``class_path``'s."""
    folders = [Path(e.removesuffix("*")) for e in class_path.split(os.pathsep) if e]
    return [f for f in folders if f.is_dir()] + spark_jar_folders()


def default_dir() -> Path:
    """``LAKEHOUSE_JARS_DIR``, else ``~/.cache/flow-platform/jars/spark-<line>``.

    ``~/.cache`` is ``$XDG_CACHE_HOME`` when set. One folder per Spark line: environments of
    two lines on one machine keep their own jars.
    """
    explicit = os.environ.get(JARS_DIR_VARIABLE)
    if explicit:
        return Path(explicit)
    return cache_root() / f"spark-{current_line().spark}"


def cache_root() -> Path:
    """``$XDG_CACHE_HOME`` (``~/.cache``)/flow-platform/jars: what the writer builds for the JVM."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "flow-platform" / "jars"


def pom_xml(jars: Sequence[Coordinate]) -> str:
    """A pom whose dependencies are ``jars``, each without transitives."""
    dependencies = "".join(
        f"""
    <dependency>
      <groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>
    </dependency>"""
        for group, artifact, version in jars
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>flowplatform</groupId>
  <artifactId>lakehouse-writer-jars</artifactId>
  <version>0.1.0</version>
  <packaging>pom</packaging>
  <dependencies>{dependencies}
  </dependencies>
</project>
"""


def _resolve(pom: str, target: Path) -> None:
    """Copy the jars into a staging folder beside ``target``, then swap it in."""
    maven = shutil.which("mvn")
    if maven is None:
        raise JarsUnavailable(
            "Maven (mvn) was not found; the lakehouse writer resolves its Spark connector jars "
            "(Kafka, Avro, Delta) with it on the first local run. Install it (Debian: apt-get "
            f"install maven), or set {JARS_DIR_VARIABLE} to a folder holding the jars with a "
            ".pom-sha256 stamp",
            folder=str(target),
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        (staging / "pom.xml").write_text(pom)
        jars = staging / "jars"
        log.info("resolving the Spark connector jars with Maven into %s", target)
        done = subprocess.run(
            [
                maven,
                "-q",
                "-B",
                "-f",
                str(staging / "pom.xml"),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={jars}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            errors = [line for line in done.stdout.splitlines() if "ERROR" in line][:5]
            raise JarsUnavailable(
                "Maven could not resolve the Spark connector jars:\n"
                + "\n".join(errors or [done.stderr.strip()]),
                folder=str(target),
            )
        _drop_jars_pyspark_ships(jars)
        shutil.rmtree(target, ignore_errors=True)
        jars.rename(target)  # another process may have won the race: then use its copy
    except OSError:
        if not any(target.glob("*.jar")):
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _drop_jars_pyspark_ships(folder: Path) -> None:
    """Remove jars whose artifact pyspark already has: two versions on one classpath clash."""
    try:
        import pyspark
    except ImportError:  # the writer extra brings pyspark; without it nothing runs Spark
        return
    shipped = {
        artifact_name(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")
    }
    for jar in folder.glob("*.jar"):
        if artifact_name(jar.name) in shipped:
            log.info("dropping %s: pyspark ships that artifact", jar.name)
            jar.unlink()


def artifact_name(file_name: str) -> str:
    """``kafka-clients-3.9.1.jar`` -> ``kafka-clients`` (strip the version)."""
    stem = file_name.removesuffix(".jar")
    parts = stem.split("-")
    for i, part in enumerate(parts):
        if part[:1].isdigit():
            return "-".join(parts[:i])
    return stem
