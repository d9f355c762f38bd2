"""The run directory and what it holds: the config, checkpoints, shards of
positions, where weights come from, the resignation threshold."""
