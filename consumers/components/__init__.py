"""The log-driven components: projector, reconciler, probe, watchdog and telemetry, on one
log-consumer base."""
