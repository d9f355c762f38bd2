"""alphazero: AlphaZero self-play for chess.

The network, its input planes and move indices for python-chess, the config
and presets, the run directory and the command line. Knows nothing of Ray.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("alphazero")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
