"""The production projection store: PostgreSQL through asyncpg."""
