"""The local development stack: a real Kafka broker and the JVM jars, without Docker.

Quickstart::

    $ devstack up          # resolve jars with Maven, format storage, start KRaft broker
    $ eval "$(devstack env)"
    $ devstack down
    $ devstack up --secure --flow tpch=tpch.   # a SASL_SSL broker with ACLs beside it (19094)
    $ eval "$(devstack env --secure --user flow-tpch)"

From Python::

    from devstack import broker, jars
    layout = broker.up()             # idempotent; layout.bootstrap == "127.0.0.1:19092"
    spark_jars = jars.spark_jars()   # Kafka/Avro/Delta connector jars for spark.jars

    from devstack import secure
    layout = secure.up(flows=[secure.FlowGrant("tpch", "tpch.")])  # users, ACLs, dev CA
"""

from devstack.errors import DevstackError

__all__ = ["DevstackError"]
