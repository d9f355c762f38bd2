"""The network: its modules (residual tower, Chessformer), input planes, the
Evaluator that runs it, precision, and where the built-in weights are."""
