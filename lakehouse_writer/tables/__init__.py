"""The Delta tables: created, evolved, listed and maintained."""
