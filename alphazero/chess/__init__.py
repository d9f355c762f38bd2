"""Chess beside the Cython core: move indices for python-chess, PGN written
and read, Stockfish's path."""
