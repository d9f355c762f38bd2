"""PGN tags for how a game ended, the same in self-play games and match games.

``Termination`` holds one of the PGN standard's values (section 9.8.1 of the
1994 specification): "normal" for a game ended by the rules of chess or by a
resignation, "adjudication" for one stopped by a rule of ours (the ply
limit, Syzygy tables). The rule itself goes in ONE custom tag,
``TerminationDetail``, named as in shards and match records: checkmate,
stalemate, insufficient_material, fifty_moves, threefold_repetition,
seventyfive_moves, fivefold_repetition, ply_limit, tablebase or resignation.

Example::

    game.headers.update(termination_tags("ply_limit"))
    # Termination "adjudication", TerminationDetail "ply_limit"
"""

from __future__ import annotations

DETAIL_TAG = "TerminationDetail"
REPETITIONS = ("threefold_repetition", "fivefold_repetition")
"""The TerminationDetail values of a game drawn by repetition."""

STANDARD_TERMINATIONS = (
    "abandoned", "adjudication", "death", "emergency", "normal", "rules infraction", "time forfeit", "unterminated",
)
"""Every Termination value the PGN standard defines."""

_STANDARD_TERMINATION = {
    "checkmate": "normal",
    "stalemate": "normal",
    "insufficient_material": "normal",
    "fifty_moves": "normal",
    "threefold_repetition": "normal",
    "seventyfive_moves": "normal",
    "fivefold_repetition": "normal",
    "resignation": "normal",
    "ply_limit": "adjudication",
    "tablebase": "adjudication",
    "time_forfeit": "time forfeit",
    "time_forfeit_insufficient_material": "time forfeit",
}


def termination_tags(termination: str) -> dict[str, str]:
    """Gets the PGN tags of a game that ended by ``termination`` (a rule name, as above).

    A name not in the list above is kept in TerminationDetail, with
    Termination "unterminated" (the standard's value for an unknown end).
    """
    return {"Termination": _STANDARD_TERMINATION.get(termination, "unterminated"), DETAIL_TAG: termination}
