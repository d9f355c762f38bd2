"""The ladder below Stockfish's weakest level: the shipped calibration, its rungs, the nearest ones, bounds that
replace ratings no game supports, and `alphazero ladder calibrate` on a tiny scale."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import chess
import pytest
from rich.console import Console

import alphazero.chess.stockfish as stockfish_module
from alphazero.app.cli import main
from alphazero.chess.stockfish import FAIRY_INSTALL_HINT, find_fairy_stockfish
from alphazero.errors import UserError
from eval.agent import Agent, Choice, RandomAgent, RandomMixAgent
from eval.agents import parse_player
from eval.checkpoint_ratings import load_ratings, ratings_table
from eval.curve import Checkpoint, CurvePoint, CurveSettings, curve_table, pairings
from eval.elo import Bound, Rating, Ratings, fit_ratings, rating_text
from eval.ladder import (
    ANCHOR,
    ANCHOR_ELO,
    DEFAULT_RUNGS,
    Ladder,
    Rung,
    estimate_of,
    fit_ladder,
    load_ladder,
    playable_ladder,
    stored_results,
)
from tests.helpers import REQUIRE_ENV, stockfish_or_skip


def fairy_or_skip() -> str:
    """Returns Fairy-Stockfish's path; skips the test without it, or FAILS it when CI requires the engines."""
    path = find_fairy_stockfish()
    if path is None:
        if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
            pytest.fail(f"Fairy-Stockfish is required ({REQUIRE_ENV}=1) but was not found; {FAIRY_INSTALL_HINT}")
        pytest.skip(f"Fairy-Stockfish not found; {FAIRY_INSTALL_HINT}")
    return path


def _ladder(*rungs: tuple[str, float], anchor: str = "sf") -> Ladder:
    return Ladder(tuple(Rung(spec, elo, elo - 50, elo + 50, 100) for spec, elo in rungs), anchor, 1320.0)


# --- the shipped calibration -------------------------------------------------------------------


def test_a_rungs_elo_is_read_from_the_shipped_calibration() -> None:
    ladder = load_ladder()
    assert ladder.specs() == list(DEFAULT_RUNGS)
    assert ladder.elo(ANCHOR) == ANCHOR_ELO == 1320.0
    # Each rung is weaker than the next, and every rating has its games and a 95% interval around it.
    elos = [ladder.elo(spec) for spec in DEFAULT_RUNGS]
    assert elos == sorted(elos) and elos[0] < 600 < 1320 < elos[-1]
    assert all(rung.low <= rung.elo <= rung.high and rung.bound is None for rung in ladder.rungs)
    # Each pairing of neighbours played at least 100 games, and the kept results refit to the table.
    results = stored_results()
    assert all(len(result.results) >= 100 for result in results)
    refit, _ = fit_ladder(results, ladder.specs(), ladder.ply_limit)
    assert [round(rung.elo) for rung in refit.rungs] == [round(rung.elo) for rung in ladder.rungs]
    with pytest.raises(UserError, match="not a rung of the ladder; its rungs: random"):
        ladder.elo("stockfish:elo=2000")


def test_a_file_that_is_no_ladder_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no ladder there; `alphazero ladder calibrate` writes one"):
        load_ladder(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "alphazero-curve"}))
    with pytest.raises(UserError, match="is not a ladder calibration"):
        load_ladder(tmp_path / "other.json")


# --- choosing rungs ----------------------------------------------------------------------------------


def test_the_rungs_nearest_a_networks_strength_are_chosen() -> None:
    ladder = _ladder(("random", 0.0), ("mix", 400.0), ("weak", 800.0), ("sf", 1320.0), ("above", 1800.0))
    specs = lambda rungs: [rung.spec for rung in rungs]  # noqa: E731
    assert specs(ladder.nearest(700.0)) == ["mix", "weak"]
    assert specs(ladder.nearest(1000.0, 3)) == ["mix", "weak", "sf"]
    assert specs(ladder.nearest(-300.0)) == ["random", "mix"]
    # Not yet rated: spread from the bottom to Stockfish's weakest level.
    assert specs(ladder.nearest(None)) == ["random", "sf"]
    assert specs(ladder.nearest(None, 3)) == ["random", "weak", "sf"]
    # A network that lost every game to the rung at 800 plays that rung and the one below next time.
    lost_all = Rating(650.0, 300.0, 1000.0, 4, Bound("below", 800.0))
    assert specs(ladder.nearest(estimate_of(lost_all))) == ["mix", "weak"]
    assert estimate_of(Rating(900.0, 800.0, 1000.0, 40)) == 900.0 and estimate_of(None) is None
    with pytest.raises(UserError, match="at least 1"):
        ladder.nearest(500.0, 0)


def test_the_curve_pairs_each_checkpoint_with_its_rungs() -> None:
    chosen = [Checkpoint(0, 0.0), Checkpoint(10, 1.0)]
    settings = CurveSettings(games=3, simulations=8, rungs=2)
    pairs = pairings(chosen, settings, {0: ("random", "fairy:skill=-20"), 10: ("fairy:skill=-20", ANCHOR)})
    rung_pairs = {(pair.a, pair.b) for pair in pairs if not pair.b.startswith("step")}
    assert rung_pairs == {("step0:search:8", "random"), ("step10:search:8", "random"),
                          ("step0:search:8", "fairy:skill=-20"), ("step10:search:8", "fairy:skill=-20"),
                          ("step10:search:8", ANCHOR)}
    assert all(pair.games == 4 for pair in pairs)


def test_the_curve_chooses_rungs_from_the_periodic_ratings_and_spreads_them_without(tmp_path: Path) -> None:
    stockfish_or_skip()
    fairy_or_skip()
    from alphazero.presets import get_preset
    from alphazero.store.rundir import RunDir
    from eval.checkpoint_ratings import ratings_path
    from eval.curve import choose_rungs

    run, _ = RunDir.create_or_open(tmp_path / "run", get_preset("tiny"))
    chosen = [Checkpoint(0, 0.0), Checkpoint(10, 1.0)]
    ladder = load_ladder()
    weak = ladder.rungs[2]  # the periodic evaluation rated step 10 at this rung's Elo
    run.eval.mkdir(parents=True, exist_ok=True)
    ratings_path(run, 10).write_text(json.dumps({"ratings": {"search:8": {
        "elo": weak.elo, "low": weak.elo - 100, "high": weak.elo + 100, "games": 8}}}))
    rungs = choose_rungs(run, chosen, CurveSettings(simulations=8, rungs=2))
    assert rungs[0] == ("random", ANCHOR)  # nothing known of the start: the bottom and the anchor
    assert weak.spec in rungs[10] and len(rungs[10]) == 2
    assert choose_rungs(run, chosen, CurveSettings(simulations=8, rungs=0)) == {}


def test_the_manual_shows_the_shipped_table() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "ladder.md").read_text()
    for rung in load_ladder().rungs:
        assert any(f"`{rung.spec}`" in line and f"| {rung.elo:.0f} |" in line for line in text.splitlines()), rung


# --- bounds instead of ratings no game supports -----------------------------------------------------


def _lost_and_won_everything() -> Ratings:
    games = [("net", ANCHOR, 0.0)] * 4 + [("net", "random", 0.5)] * 2 + [("strong", ANCHOR, 1.0)] * 4
    return fit_ratings(games, {ANCHOR: 1320.0})


def test_an_all_lost_rating_prints_as_a_bound_and_an_all_won_one_too() -> None:
    ratings = _lost_and_won_everything()
    assert ratings["net"].bound == Bound("below", 1320.0)
    assert ratings["strong"].bound == Bound("above", 1320.0)
    assert rating_text(ratings["net"]) == "below 1320" and rating_text(ratings["strong"]) == "above 1320"
    assert ratings["random"].bound is None  # it met no anchor
    assert rating_text(Rating(1136.4, 878.0, 1393.2, 40)) == "1136 (95%: 878..1393)"
    # The table of `alphazero eval` shows the bound where the number and its interval were.
    out = io.StringIO()
    Console(file=out, width=120).print(ratings_table(ratings, {}, {ANCHOR: 1320.0}, "t"))
    text = out.getvalue()
    net_row = next(line for line in text.splitlines() if "net" in line)
    assert "below 1320" in net_row and ".." not in net_row
    assert "above 1320" in text


def test_a_bound_survives_the_ratings_file_and_shows_on_the_curve(tmp_path: Path) -> None:
    from eval.checkpoint_ratings import _bound

    ratings = _lost_and_won_everything()
    stored = {name: {"elo": r.elo, "low": r.low, "high": r.high, "games": r.games,
                     "bound": None if r.bound is None else vars(r.bound)} for name, r in ratings.items()}
    path = tmp_path / "ratings.json"
    path.write_text(json.dumps({"ratings": stored}))
    assert load_ratings(path)["net"].bound == Bound("below", 1320.0)
    assert _bound(None) is None
    point = CurvePoint(10, 1.0, True, 4, 900.0, 400.0, 1300.0, bound="below 1320")
    out = io.StringIO()
    Console(file=out, width=160).print(curve_table([point], Ratings({}, 0.0), {ANCHOR: 1320.0}, "t"))
    row = next(line for line in out.getvalue().splitlines() if "step 10" in line)
    assert "below 1320" in row and "900" not in row


def test_the_live_line_of_train_shows_the_bound(tmp_path: Path) -> None:
    import eval.evaluate as evaluate_module
    from alphazero.presets import get_preset
    from alphazero.store.rundir import RunDir

    run, config = RunDir.create_or_open(tmp_path / "run", get_preset("tiny"))
    periodic = evaluate_module.PeriodicEvaluation(run, config, every_steps=0)
    ratings = fit_ratings([("search:64", ANCHOR, 0.0)] * 4, {ANCHOR: 1320.0})
    periodic.off_reason = None
    periodic.last = (100, evaluate_module.CheckpointRatings(ratings, {}, 100.0))
    assert "search:64 below 1320" in periodic.status()


# --- the rungs' engines ---------------------------------------------------------------------------------


def test_a_missing_rung_engine_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stockfish_module, "find_fairy_stockfish", lambda: None)
    with pytest.raises(UserError, match="Fairy-Stockfish was not found; install it with `sudo apt-get install -y "
                                        "fairy-stockfish`"):
        parse_player("fairy:skill=-5")
    ladder, missing = playable_ladder(_ladder(("random", 0.0), ("fairy:skill=-20", 500.0), ("fairy:skill=-5", 900.0)))
    assert ladder.specs() == ["random"]
    (line,) = missing  # one line for the engine, not one per rung
    assert "needs Fairy-Stockfish" in line and "apt-get install -y fairy-stockfish" in line


def test_a_fairy_rung_plays_below_stockfishs_floor_at_a_fixed_depth() -> None:
    fairy_or_skip()
    with parse_player("fairy:skill=-20") as fairy:
        assert fairy.name == "fairy:skill=-20" and fairy.limit.depth == 1  # where its skill picks the move
        board = chess.Board()
        (choice,) = fairy.choose([board])
        assert choice.move in board.legal_moves
    with pytest.raises(UserError, match="skill=-21 is out of range"):
        parse_player("fairy:skill=-21")


class _Counting(Agent):
    def __init__(self) -> None:
        super().__init__("counting")
        self.boards = 0

    def choose(self, boards: list[chess.Board]) -> list[Choice]:  # type: ignore[override]
        self.boards += len(boards)
        return [Choice(next(iter(board.legal_moves)), 0.25) for board in boards]


def test_a_mix_plays_random_moves_on_its_share_and_asks_the_engine_for_the_rest() -> None:
    boards = [chess.Board() for _ in range(200)]
    inner = _Counting()
    mixed = RandomMixAgent(inner, 0.5, seed=1)
    choices = mixed.choose(boards)
    assert all(choice.move in boards[0].legal_moves for choice in choices)
    asked = sum(choice.value == 0.25 for choice in choices)
    assert asked == inner.boards and 60 < asked < 140  # only the engine's share reached it
    assert RandomMixAgent(_Counting(), 0.0).choose(boards[:3])[0].value == 0.25
    with pytest.raises(UserError, match="must lie in"):
        RandomMixAgent(RandomAgent(), 1.5)
    with pytest.raises(UserError, match="option random"):
        parse_player("stockfish:depth=1,random=2")


# --- the calibration command ---------------------------------------------------------------------------


def test_the_calibration_plays_fits_and_writes_a_table_on_a_tiny_scale(tmp_path: Path, capsys) -> None:
    stockfish_or_skip()
    games, out = tmp_path / "games", tmp_path / "ladder.json"
    argv = ["ladder", "calibrate", "--rung", "random", "--rung", ANCHOR, "--games", "2", "--games-dir", str(games),
            "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    ladder = load_ladder(out)
    assert ladder.specs() == ["random", ANCHOR] and ladder.elo(ANCHOR) == 1320.0
    payload = json.loads(out.read_text())
    [pairing] = payload["pairings"]
    assert (pairing["a"], pairing["b"]) == ("random", ANCHOR) and len(pairing["results"]) == 2
    counts = [pairing["results"].count(result) for result in "1=0"]
    assert [pairing["wins"], pairing["draws"], pairing["losses"]] == counts
    # Nearly always lost both (Stockfish's skill 0 is seeded by its clock and draws now and then, as in a CI run):
    # the table then shows the bound, else the fit's number and its interval.
    random_rung = ladder.rung("random")
    score = (counts[0] + counts[1] / 2) / 2
    if score in (0.0, 1.0):
        bound = "below 1320" if score == 0.0 else "above 1320"
        assert random_rung.bound == bound and bound in printed
    else:
        assert random_rung.bound is None and (random_rung.elo < 1320.0) == (score < 0.5)
        assert f"{random_rung.elo:.0f}" in printed and f"{random_rung.low:.0f}..{random_rung.high:.0f}" in printed
    assert "random" in printed and "anchor" in printed
    assert payload["games_per_pairing"] == 2 and payload["ply_limit"] == 512
    # A rerun plays nothing new: the games on disk count.
    assert main(argv) == 0 and len(stored_results(out)[0].results) == 2
    assert main(["ladder", "show", "--file", str(out)]) == 0


def test_the_calibration_refuses_rungs_without_the_anchor(tmp_path: Path, capsys) -> None:
    assert main(["ladder", "calibrate", "--rung", "random", "--rung", "stockfish:depth=1", "--games-dir",
                 str(tmp_path), "--no-progress"]) == 2
    assert "must include the anchor 'stockfish:elo=1350'" in capsys.readouterr().err
