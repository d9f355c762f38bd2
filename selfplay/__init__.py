"""Self-play on Ray: actors that play many games at once, inference, shard and PGN writers."""
