"""What keeps the broker and the cache from speaking for the database: signed task messages, sealed cache entries."""
