"""The learner: replay window over self-play shards, training loop, checkpoints, TensorBoard."""
