"""What every process runs on: settings, logs, metrics, component names, and supervision."""
