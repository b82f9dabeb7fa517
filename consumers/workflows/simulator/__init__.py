"""A Cloudflare Workflows API simulator: in-memory state, its HTTP app, and a server."""
