"""Find the external programs devstack needs (Java, Maven) or say clearly what is missing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from devstack.errors import DevstackError

MIN_JAVA = 17  # Kafka 4.x brokers and Spark 4.x both need Java 17+


def java(min_major: int = MIN_JAVA, purpose: str = "Kafka 4 and Spark 4") -> str:
    """Return the path of a ``java`` of at least ``min_major``.

    Looks at ``JAVA_HOME``, then ``PATH``, then the JDKs installed under ``/usr/lib/jvm``.
    """
    candidates = [str(Path(h) / "bin" / "java") for h in [os.environ.get("JAVA_HOME")] if h]
    candidates += [found for found in [shutil.which("java")] if found]
    candidates += sorted(str(p) for p in Path("/usr/lib/jvm").glob("*/bin/java"))
    seen: list[str] = []
    for candidate in dict.fromkeys(candidates):
        if Path(candidate).exists():
            version = _java_major(candidate)
            if version >= min_major:
                return candidate
            seen.append(f"{candidate} (Java {version})")
    raise DevstackError(
        f"{purpose} need Java {min_major} or newer; found "
        f"{', '.join(seen) or 'no Java at all'}. Install a JDK {min_major}+ (Debian: apt-get "
        f"install openjdk-{min_major}-jdk-headless) or point JAVA_HOME at one."
    )


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
    out = subprocess.run([java_bin, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise DevstackError(f"Could not read the Java version from {java_bin}: {out.strip()!r}")
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 else major  # "1.8" style versions
