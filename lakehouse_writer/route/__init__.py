"""Which engine and read path serve a table; tables applied side by side."""
