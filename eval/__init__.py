"""eval: measures agents against each other.

Agents (random, Stockfish, the UCI engine and the network agents, in one registry),
player specs (`parse_player("stockfish:elo=1500")`), the opening suite, the
match runner (PGN and JSON lines into the run directory), Elo arithmetic
(match summaries, anchored BayesElo-style rating fits), and the one mapping
between values and centipawns. Imports alphazero and mcts_ext, never Ray.
"""

from eval.agents import (
    Agent,
    Choice,
    PlayerFactory,
    PlayerKind,
    RandomAgent,
    StockfishAgent,
    describe_players,
    int_option,
    parse_player,
    players,
    register_player,
)
from eval.elo import (
    Rating,
    Ratings,
    Summary,
    elo_from_score,
    fit_ratings,
    likelihood_of_superiority,
    match_summary,
    score_from_elo,
)
from eval.match import (
    AgentContractError,
    GameRecord,
    IllegalAgentMoveError,
    MatchResult,
    format_summary,
    play_match,
)
from eval.openings import Opening, OpeningError, load_openings
from eval.scores import centipawns_to_value, score_to_value, value_to_centipawns

__all__ = [
    "Agent",
    "AgentContractError",
    "Choice",
    "GameRecord",
    "IllegalAgentMoveError",
    "MatchResult",
    "Opening",
    "OpeningError",
    "PlayerFactory",
    "PlayerKind",
    "RandomAgent",
    "Rating",
    "Ratings",
    "StockfishAgent",
    "Summary",
    "centipawns_to_value",
    "describe_players",
    "elo_from_score",
    "fit_ratings",
    "format_summary",
    "int_option",
    "likelihood_of_superiority",
    "load_openings",
    "match_summary",
    "parse_player",
    "play_match",
    "players",
    "register_player",
    "score_from_elo",
    "score_to_value",
    "value_to_centipawns",
]
