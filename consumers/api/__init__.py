"""The HTTP API: the FastAPI app, its models and guards, and the server component."""
