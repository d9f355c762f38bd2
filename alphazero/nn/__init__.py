"""The network: its modules (residual tower, Chessformer, the heads' outputs they share), input planes, the
Evaluator that runs it (with its batch-size buckets, CUDA graphs, compiled passes and legal-move gather),
precision, parity, and where the built-in weights are."""
