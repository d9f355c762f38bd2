"""Self-play on Ray: actors that play many games at once, inference, shard and PGN writers."""

NAMESPACE = "alphazero"  # the Ray namespace of the named actors: self-play actors, shard sinks
