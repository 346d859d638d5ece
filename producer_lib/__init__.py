"""producer_lib: the library flow repos import to publish change rows to Kafka."""
