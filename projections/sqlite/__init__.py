"""The embedded projection store: SQLite, zero setup."""
