"""The event log: the port, the codec, and its SQLite and Kafka adapters."""
