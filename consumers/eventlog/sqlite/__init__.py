"""The embedded event log: one SQLite file, one partition a topic.

Deviations from the port's Kafka-shaped contract: every topic has exactly one partition, and a
consumer group's partitions belong to one member at a time through a lease row (renewed while
it polls; taken over when it expires or its owner process is gone on this host). Several
processes may share the file: writers serialise on SQLite's write lock (WAL mode).

``log.py`` is the log, ``consumer.py`` a group member, ``leases.py`` the lease, ``records.py``
the records table, ``schema.py`` the file's tables; ``inspection.py`` and ``retention.py`` the
log's ports, ``survey.py`` what ``auditrec doctor`` reads of a file without opening the log.
"""
