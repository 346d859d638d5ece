r"""Which topics are the writer's: its topics regex, compiled and matched by the JVM.

Spark's Kafka source subscribes with ``subscribePattern``, a ``java.util.regex.Pattern`` that
must match a whole topic name. Python's ``re`` is another dialect: it refuses ``\p{Alpha}``,
which Java takes, so a writer that asked Python which topics were its own counted every
catalog topic as its own and created empty tables for topics it never read. Here the
pattern is compiled once, through the session's py4j gateway, by the same engine that
subscribes with it, and every "is this topic ours" is asked of that engine.

Each question is a py4j round trip. A broker shared by many flows has thousands of topics in
its schema catalog, and a writer starting up asked about each before its first batch
(figures in ``docs/PERFORMANCE.md``). :meth:`TopicPattern.select` asks about many topics in
one round trip (Kafka topic names hold no line break, so they travel as one text, split and
filtered by the JVM).
"""

from __future__ import annotations

from collections.abc import Iterable
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
        jvm = spark.sparkContext._jvm
        assert jvm is not None, "the session has no JVM"  # a classic session always has one
        self.regex = regex
        self._pattern = _compile(jvm, regex)
        self._seen: dict[str, bool] = {}
        self._lines = jvm.java.util.regex.Pattern.compile("\n")
        self._joining = jvm.java.util.stream.Collectors.joining("\n")
        self._matches = self._pattern.asMatchPredicate()

    def __call__(self, topic: str) -> bool:
        """Whether ``topic`` is one the writer subscribes to (the pattern matches all of it)."""
        hit = self._seen.get(topic)
        if hit is None:
            if len(self._seen) >= _CACHE_LIMIT:
                self._seen.clear()
            hit = self._seen[topic] = bool(self._pattern.matcher(topic).matches())
        return hit

    def select(self, topics: Iterable[str]) -> set[str]:
        """The topics of ``topics`` the writer subscribes to: one JVM round trip for all."""
        wanted = set(topics)
        hits = {t: self._seen[t] for t in wanted if t in self._seen}
        unseen = sorted(wanted - hits.keys())
        if unseen:
            matched = set(self._matching(unseen))
            if len(self._seen) + len(unseen) > _CACHE_LIMIT:
                self._seen.clear()
            for topic in unseen:
                hits[topic] = self._seen[topic] = topic in matched
        return {t for t, hit in hits.items() if hit}

    def _matching(self, topics: list[str]) -> list[str]:
        """Those of ``topics`` the pattern matches whole, filtered by the JVM."""
        if any(not t or "\n" in t for t in topics):  # not Kafka topic names: one by one
            return [t for t in topics if self._pattern.matcher(t).matches()]
        stream = self._lines.splitAsStream("\n".join(topics))
        joined = stream.filter(self._matches).collect(self._joining)
        return str(joined).split("\n") if joined else []

    def __repr__(self) -> str:
        return f"TopicPattern({self.regex!r})"


def _compile(jvm: Any, regex: str) -> Any:
    """``java.util.regex.Pattern.compile(regex)``, or a :class:`TopicPatternError`."""
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
