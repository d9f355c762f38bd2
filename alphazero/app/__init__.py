"""The application: the command line, `train`, `doctor` and the benchmarks.

The one room of alphazero/ that brings selfplay/, learner/ and eval/ together.
"""
