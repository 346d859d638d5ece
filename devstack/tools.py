"""Find the external programs devstack needs (Java, Maven) or say clearly what is missing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from devstack.errors import DevstackError

MIN_JAVA = 17  # Kafka 4.x brokers and Spark 4.x both need Java 17+


def java() -> str:
    """Return the path of a ``java`` 17+ executable (``JAVA_HOME`` first, then ``PATH``)."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not candidate or not Path(candidate).exists():
        raise DevstackError(
            "Java was not found. Install a JDK 17 or newer (Debian: apt-get install "
            "openjdk-17-jdk-headless) or set JAVA_HOME."
        )
    version = _java_major(candidate)
    if version < MIN_JAVA:
        raise DevstackError(f"{candidate} is Java {version}; Kafka 4 and Spark 4 need Java 17+.")
    return candidate


def maven() -> str:
    """Return the path of ``mvn``."""
    found = shutil.which("mvn")
    if not found:
        raise DevstackError(
            "Maven (mvn) was not found; devstack resolves the Kafka and Spark jars with it. "
            "Install it (Debian: apt-get install maven)."
        )
    return found


def _java_major(java_bin: str) -> int:
    out = subprocess.run(
        [java_bin, "-version"], capture_output=True, text=True, check=False
    ).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise DevstackError(f"Could not read the Java version from {java_bin}: {out.strip()!r}")
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 else major  # "1.8" style versions
