"""The ratings of one checkpoint's evaluation and where they go: each agent's difference from the start
(CheckpointRatings), the tables that show them, the JSON file that keeps them, and TensorBoard's curves.

eval.evaluate fits the ratings from its games and writes them through this
module; load_ratings reads a ratings file back.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table

from alphazero.errors import UserError
from alphazero.store.checkpoint import checkpoint_name
from alphazero.store.rundir import RunDir
from alphazero.store.sources import Network
from eval.elo import Bound, Rating, Ratings, Summary
from eval.eval_settings import EvalSettings
from eval.match import MatchResult

RATINGS_FORMAT = "alphazero-ratings"


def ratings_path(run: RunDir, step: int) -> Path:
    """Returns the ratings JSON of a step: run/eval/ratings_step_000001200.json."""
    return run.eval / f"ratings_{checkpoint_name(step).removesuffix('.pt')}.json"


class CheckpointRatings(Ratings):
    """The ratings of one evaluation (a Ratings) and each agent's difference from the start.

    ``vs_start`` maps an agent ('search:64') to the Summary of its twin match
    against the start's same agent (empty when no twin played);
    ``fall_margin`` is the Elo below the start at which an agent has fallen.
    """

    def __init__(self, ratings: Ratings, vs_start: dict[str, Summary], fall_margin: float) -> None:
        super().__init__(ratings, ratings.draw_elo)
        self.vs_start = vs_start
        self.fall_margin = fall_margin

    def fallen(self) -> list[str]:
        """Lists the agents whose difference from the start is below -fall_margin with all of its 95%
        interval below 0: a fall that the games show, not noise."""
        return [agent for agent, summary in self.vs_start.items()
                if summary.elo is not None and summary.elo_high is not None
                and summary.elo < -self.fall_margin and summary.elo_high < 0]

    def fall_warnings(self) -> list[str]:
        """One line per fallen agent: 'search:64 fell 180 Elo below the start (95%: -260..-100, 92 games)'."""
        return [f"{agent} fell {-self.vs_start[agent].elo:.0f} Elo below the start "  # type: ignore[operator]
                f"({_interval(self.vs_start[agent])}, {self.vs_start[agent].games} games)"
                for agent in self.fallen()]

    def start_text(self) -> str:
        """The differences from the start on one line: 'vs start: policy +12 (-40..+65), search:64 -30 (...)'."""
        parts = [f"{agent} {_signed(summary.elo)} ({_interval(summary, short=True)})"
                 for agent, summary in self.vs_start.items()]
        return "vs start: " + ", ".join(parts) if parts else ""


def _signed(elo: float | None) -> str:
    if elo is None:
        return "?"
    if math.isinf(elo):
        return "+inf" if elo > 0 else "-inf"
    return f"{round(elo):+d}"


def _interval(summary: Summary, *, short: bool = False) -> str:
    text = f"{_signed(summary.elo_low)}..{_signed(summary.elo_high)}"
    return text if short else f"95%: {text}"


def versus_start(twin_results: Sequence[MatchResult]) -> dict[str, Summary]:
    """Summarises each twin match from the agent's side, keyed by the agent's name."""
    return {result.agent_a: result.summary for result in twin_results}

# --- outputs ----------------------------------------------------------------------------------


def ratings_table(ratings: Ratings, scores: dict[str, float], anchors: dict[str, float], title: str) -> Table:
    """Builds the rich table: agent, Elo, 95% interval, games, score; best first, anchors marked. A rating whose
    games against the anchors were all lost (or all won) shows its bound ('below 1320') and no interval."""
    table = Table(title=title)
    for column, justify in (("Agent", "left"), ("Elo", "right"), ("95% interval", "right"),
                            ("Games", "right"), ("Score", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for name, rating in sorted(ratings.items(), key=lambda item: -item[1].elo):
        interval = "anchor" if name in anchors else f"{rating.low:.0f}..{rating.high:.0f}"
        elo = f"{rating.elo:.0f}"
        if rating.bound is not None:
            elo, interval = rating.bound.text(), "-"
        score = f"{100 * scores[name]:.1f}%" if name in scores else "-"
        table.add_row(name, elo, interval, str(rating.games), score)
    return table


def start_table(ratings: CheckpointRatings) -> Table:
    """Builds the rich table of each agent's twin match against the start: difference, interval, games."""
    table = Table(title="Against the start (step 0): each agent against the same agent of the step-0 network")
    for column, justify in (("Agent", "left"), ("Elo difference", "right"), ("95% interval", "right"),
                            ("Games", "right"), ("Score", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    fallen = set(ratings.fallen())
    for agent, summary in ratings.vs_start.items():
        score = f"{100 * summary.score:.1f}%" if summary.score is not None else "-"
        name = f"{agent} (fell below the start)" if agent in fallen else agent
        table.add_row(name, _signed(summary.elo), _interval(summary, short=True), str(summary.games), score)
    return table


def ratings_json(network: Network, step: int, settings: EvalSettings, ratings: CheckpointRatings,
                  scores: dict[str, float], anchors: dict[str, float], results: Sequence[MatchResult]) -> str:
    payload: dict[str, Any] = {
        "format": RATINGS_FORMAT,
        "version": 1,
        "step": step,
        "network": network.label,
        "checkpoint": str(network.path) if network.path is not None else None,
        "fresh_weights": network.fresh,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": dataclasses.asdict(settings),
        "anchors": anchors,
        "draw_elo": ratings.draw_elo,
        "ratings": {
            name: {**dataclasses.asdict(r), "score": scores.get(name), "anchor": name in anchors}
            for name, r in ratings.items()
        },
        "vs_start": {agent: dataclasses.asdict(summary) for agent, summary in ratings.vs_start.items()},
        "fallen_below_start": ratings.fallen(),
        "matches": [
            {"agent_a": r.agent_a, "agent_b": r.agent_b, "wins": r.wins, "draws": r.draws, "losses": r.losses,
             "jsonl": str(r.jsonl_path) if r.jsonl_path else None, "pgn": str(r.pgn_path) if r.pgn_path else None}
            for r in results
        ],
    }
    return json.dumps(payload, indent=2) + "\n"


def load_ratings(path: str | os.PathLike[str]) -> dict[str, Rating]:
    """Reads the ratings of a ratings JSON written by evaluate_checkpoint.

    Raises UserError if the file is missing or not a ratings file.
    """
    try:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
        return {name: Rating(r["elo"], r["low"], r["high"], r["games"], _bound(r.get("bound")))
                for name, r in payload["ratings"].items()}
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(f"{path} is not a ratings file: {error}") from None


def _bound(stored: Any) -> Bound | None:
    """A rating's bound as ratings_json writes it ({"side": "below", "elo": 1320.0}), None when absent."""
    return None if stored is None else Bound(str(stored["side"]), float(stored["elo"]))


# TensorBoard's Custom Scalars tab: every agent and anchor on one chart, the start's agents
# included, and the differences from the start on another.
ELO_LAYOUT = {"eval": {"Elo of every agent, with the anchors and the start": ["Multiline", [r"elo/.*"]],
                       "Elo difference from the start (step 0), with 95% bounds": ["Multiline", [r"vs_start/.*"]]}}


def write_ratings_tensorboard(run: RunDir, step: int, ratings: CheckpointRatings, anchors: dict[str, float]) -> None:
    """Adds `elo/<agent>` scalars at `step` under run/tb/eval/, anchors and the start's agents included (an
    agent with a bound instead of a rating its games support gets `elo_bound/<agent>` at the bound instead);
    `vs_start/<agent>` (and `_low`, `_high`) for each twin match, `vs_start/fallen` (the number of agents
    fallen below the start); and the layout."""
    from torch.utils.tensorboard import SummaryWriter  # imported here: it is slow and only needed now

    writer = SummaryWriter(log_dir=str(run.tb / "eval"))
    try:
        writer.add_custom_scalars(ELO_LAYOUT)
        for name, rating in sorted(ratings.items()):
            if rating.bound is None:
                writer.add_scalar(f"elo/{name}", rating.elo, step)
            else:
                writer.add_scalar(f"elo_bound/{name}", rating.bound.elo, step)
        for agent, summary in ratings.vs_start.items():
            for suffix, value in (("", summary.elo), ("_low", summary.elo_low), ("_high", summary.elo_high)):
                if value is not None and math.isfinite(value):
                    writer.add_scalar(f"vs_start/{agent}{suffix}", value, step)
        if ratings.vs_start:
            writer.add_scalar("vs_start/fallen", len(ratings.fallen()), step)
    finally:
        writer.close()
