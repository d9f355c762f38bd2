"""Chess beside the Cython core: move indices for python-chess, PGN written
and read (engines' evaluations in comments included), engine scores as win
probabilities, Stockfish's path."""
