"""The Kafka adapter of the event log (aiokafka): the log, consumer groups, offsets, records,
the log's ports (``inspection.py``, ``retention.py``), what ``auditrec doctor`` reads of a
cluster (``survey.py``), and the translation of driver errors."""
