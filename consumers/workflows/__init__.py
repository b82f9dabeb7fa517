"""The Cloudflare Workflows API: the probe's REST client, and a simulator of the API."""
