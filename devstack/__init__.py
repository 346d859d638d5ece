"""The local development stack: a real Kafka broker and the JVM jars, without Docker.

Quickstart::

    $ devstack up          # resolve jars with Maven, format storage, start KRaft broker
    $ eval "$(devstack env)"
    $ devstack down

From Python::

    from devstack import broker, jars
    layout = broker.up()             # idempotent; layout.bootstrap == "127.0.0.1:19092"
    spark_jars = jars.spark_jars()   # Kafka/Avro/Delta connector jars for spark.jars
"""

from devstack.errors import DevstackError

__all__ = ["DevstackError"]
