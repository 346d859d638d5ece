"""Shared fixtures: a real Kafka broker, a topic per test, a real SparkSession.

The fixtures live in ``tests/support``; this file only wires them in.
"""

pytest_plugins = (
    "tests.support.kafka",
    "tests.support.postgres",
    "tests.support.registry",
    "tests.support.registry_login",
    "tests.support.spark",
)
