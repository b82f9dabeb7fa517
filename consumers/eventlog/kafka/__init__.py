"""The Kafka adapter of the event log (aiokafka): the log, consumer groups, offsets, records,
and the translation of driver errors."""
