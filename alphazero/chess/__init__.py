"""Chess beside the Cython core: move indices for python-chess, PGN written
and read (engines' evaluations in comments included), engine scores as win
probabilities, Lichess puzzle CSVs read and replayed, Stockfish's path."""
