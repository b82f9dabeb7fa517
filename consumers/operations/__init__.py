"""What the CLI and the HTTP API share: backends, publishing, on-demand status, sweeps,
outcomes, freshness, rebuild."""
