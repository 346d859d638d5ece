"""What an operator sees: status, metrics, monitoring, failures."""
