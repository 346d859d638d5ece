"""What each row type does to a table, written once for every engine."""
