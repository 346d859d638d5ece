r"""Which topics are the writer's: its topics regex, compiled and matched by the JVM.

Spark's Kafka source subscribes with ``subscribePattern``, a ``java.util.regex.Pattern`` that
must match a whole topic name. Python's ``re`` is another dialect: it refuses ``\p{Alpha}``,
which Java takes, so a writer that asked Python which topics were its own counted every
catalog topic as its own and created empty tables for topics it never read. Here the
pattern is compiled once, through the session's py4j gateway, by the same engine that
subscribes with it, and every "is this topic ours" is asked of that engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakehouse_writer.errors import TopicPatternError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["TopicPattern"]

_CACHE_LIMIT = 10_000  # topic names remembered; a cluster has far fewer, this only bounds memory


class TopicPattern:
    """The topics regex as Java compiles it; calling it says whether a topic is the writer's.

    Args:
        spark: The writer's session (its JVM compiles and matches the pattern).
        regex: The topics regex (``LAKEHOUSE_TOPICS_REGEX``); it must match a whole name.

    Raises:
        TopicPatternError: Java refuses the pattern (the message is Java's).
    """

    def __init__(self, spark: SparkSession, regex: str) -> None:
        self.regex = regex
        self._pattern = _compile(spark, regex)
        self._seen: dict[str, bool] = {}

    def __call__(self, topic: str) -> bool:
        """Whether ``topic`` is one the writer subscribes to (the pattern matches all of it)."""
        hit = self._seen.get(topic)
        if hit is None:
            if len(self._seen) >= _CACHE_LIMIT:
                self._seen.clear()
            hit = self._seen[topic] = bool(self._pattern.matcher(topic).matches())
        return hit

    def __repr__(self) -> str:
        return f"TopicPattern({self.regex!r})"


def _compile(spark: SparkSession, regex: str) -> Any:
    """``java.util.regex.Pattern.compile(regex)``, or a :class:`TopicPatternError`."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None, "the session has no JVM"  # a classic session always has one
    try:
        return jvm.java.util.regex.Pattern.compile(regex)
    except Exception as exc:  # pyspark converts py4j's error into its own captured ones
        java = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
        if java is None or java.getClass().getName() != "java.util.regex.PatternSyntaxException":
            raise
        raise TopicPatternError(
            f"the topics regex is not a valid Java regex: {java.getDescription()} near index "
            f"{java.getIndex()}; fix LAKEHOUSE_TOPICS_REGEX (or --topics)",
            regex=regex,
        ) from exc
