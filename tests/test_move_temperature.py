"""Self-play's move temperature over the whole game (search.temperature*, lc0's and KataGo's schedules).

The schedule (mcts_ext.params.SearchSettings.move_temperature and its C twin),
its value cutoff, what it does to games played by a fixed network, what it
leaves alone (Gumbel, analysis, AlphaZero's old rule), and its settings' checks.
"""

from __future__ import annotations

import math

import pytest
import torch

from alphazero.config import apply_overrides, to_toml
from alphazero.errors import UserError
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import build_network
from alphazero.presets import PRESET_NAMES, from_toml, get_preset
from alphazero.search import ANALYSIS, UCI, search_params
from mcts_ext import Board
from mcts_ext.driver import analyse, run, uniform_evaluator
from mcts_ext.params import SearchParams, SearchSettings
from mcts_ext.search import MultiGameSearch
from tests.helpers import material_evaluator, play_games

PAWN = "k7/8/8/8/8/8/P7/K7 w - - 0 1"  # White has four moves: a2a4, a2a3, a1b1, a1b2
HANGING_QUEEN = "4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1"  # Rxd5 wins the queen; every other move leaves it
pytestmark = pytest.mark.usefixtures("one_torch_thread")  # the fixed network's games; the machine is shared

SCHEDULE = dict(temperature_plies=30, temperature=1.0, temperature_endgame=0.6, temperature_halflife=19.0)


# --- the schedule ---------------------------------------------------------------------------------------------

def test_the_schedule_holds_the_opening_then_halves_its_excess_every_halflife() -> None:
    settings = SearchSettings(**SCHEDULE)
    # The opening at T = 1; then 0.6 + 0.4 / 2^((ply - 30) / 19): 1.0 at 30, 0.8 at 49, 0.7 at 68, 0.65 at 87.
    for ply, wanted in ((0, 1.0), (29, 1.0), (30, 1.0), (49, 0.8), (68, 0.7), (87, 0.65)):
        assert settings.move_temperature(ply) == pytest.approx(wanted), ply
    assert 0.6 < settings.move_temperature(511) < 0.6 + 1e-6  # above the endgame temperature to the end
    # AlphaZero's rule, the defaults: T = 1 for 30 plies, then the most visited move.
    assert [SearchSettings().move_temperature(ply) for ply in (0, 29, 30, 300)] == [1.0, 1.0, 0.0, 0.0]
    # No half-life: the endgame temperature at once (lc0's TempCutoffMove).
    at_once = SearchSettings(temperature_plies=10, temperature_endgame=0.3)
    assert [at_once.move_temperature(ply) for ply in (9, 10, 200)] == [1.0, 0.3, 0.3]
    # A zero early temperature decays up towards a warmer endgame just as well.
    warming = SearchSettings(temperature_plies=0, temperature=0.0, temperature_endgame=0.5, temperature_halflife=4)
    assert warming.move_temperature(4) == pytest.approx(0.25)


@pytest.mark.parametrize("settings", [SCHEDULE, {}, dict(temperature_plies=5, temperature_endgame=0.25),
                                      dict(temperature_plies=0, temperature=2.0, temperature_endgame=0.1,
                                           temperature_halflife=3.5)])
def test_the_search_computes_the_schedule_as_the_settings_do(settings: dict) -> None:
    search = MultiGameSearch(1, SearchParams(**settings))
    python = SearchSettings(**settings)
    for ply in range(300):
        assert search.move_temperature(ply) == pytest.approx(python.move_temperature(ply), rel=1e-6, abs=1e-7), ply
    with pytest.raises(ValueError, match="ply must be at least 0"):
        search.move_temperature(-1)


def test_every_puct_preset_keeps_a_temperature_to_its_last_ply_and_analysis_none() -> None:
    puct = [name for name in PRESET_NAMES if get_preset(name).search.algorithm == "puct"]
    assert {"small", "alphazero", "cf-6m"} <= set(puct)
    for name in puct:
        search = get_preset(name).search
        assert min(search.move_temperature(ply) for ply in range(search.ply_limit)) >= 0.6, name
        assert search.temperature_value_cutoff < 1.0, name
        for mode in (ANALYSIS, UCI):  # the agents and the engine play the best move
            params = search_params(search, mode)
            assert params.move_temperature(0) == params.move_temperature(400) == 0.0, (name, mode)


def test_a_saved_config_from_before_the_schedule_resumes_with_alphazeros_rule() -> None:
    small = get_preset("small")
    names = ("temperature_endgame", "temperature_halflife", "temperature_value_cutoff")
    old_text = "\n".join(line for line in to_toml(small).splitlines() if not line.startswith(names))
    assert all(name in to_toml(small) for name in names)
    old = from_toml(old_text)
    assert (old.search.temperature_endgame, old.search.temperature_halflife,
            old.search.temperature_value_cutoff) == (0.0, 0.0, 1.0)
    assert old.search.move_temperature(30) == 0.0 and from_toml(to_toml(small)) == small


# --- the value cutoff -----------------------------------------------------------------------------------------

# The root's children's visits and Q (for White, who chooses) on a constructed tree.
WANTED = {"a2a4": (60, 0.1), "a2a3": (25, 0.0), "a1b1": (12, -0.3), "a1b2": (3, -0.5)}


def _constructed(**params: float) -> MultiGameSearch:
    """A search of 4 simulations of PAWN whose backups bring the root's children to WANTED."""
    search = analyse(Board(PAWN), uniform_evaluator, 4, **params)
    for uci, (n, q) in WANTED.items():
        visits = {move: v for move, _, v, _, _ in search.root_stats(0)}
        more = n - visits[uci]
        assert more > 0
        search.repeat_backup(0, [uci], -q * n / more, more)  # the child's side to move sees -Q
    stats = {uci: (n, q) for uci, _, n, q, _ in search.root_stats(0)}
    assert all(stats[uci] == pytest.approx(wanted) for uci, wanted in WANTED.items())
    return search


def test_the_distribution_is_visits_to_the_one_over_t_of_the_moves_within_the_cutoff() -> None:
    everything = _constructed(temperature=1.0).move_distribution(0)
    assert everything == pytest.approx({"a2a4": 0.60, "a2a3": 0.25, "a1b1": 0.12, "a1b2": 0.03})
    # A cutoff of 0.1 (win probability; Q 0.2) below the best move's Q of 0.1: a1b1 (-0.3) and a1b2 (-0.5) go.
    cut = _constructed(temperature=1.0, temperature_value_cutoff=0.1).move_distribution(0)
    assert cut == pytest.approx({"a2a4": 60 / 85, "a2a3": 25 / 85, "a1b1": 0.0, "a1b2": 0.0})
    # At T = 0.5 the visits are squared; a cutoff of 0.2 (Q 0.4) keeps a1b1 (-0.3) but not a1b2.
    squares = 60**2 + 25**2 + 12**2
    half = _constructed(temperature=0.5, temperature_value_cutoff=0.2).move_distribution(0)
    assert half == pytest.approx({"a2a4": 3600 / squares, "a2a3": 625 / squares, "a1b1": 144 / squares,
                                  "a1b2": 0.0})
    # Temperature 0: the most visited move, certainly.
    assert _constructed(temperature=0.0).move_distribution(0) == {"a2a4": 1.0, "a2a3": 0.0, "a1b1": 0.0,
                                                                 "a1b2": 0.0}


def test_the_value_cutoff_keeps_a_hot_temperature_from_leaving_the_queen_hanging() -> None:
    board = Board(HANGING_QUEEN)
    hot = analyse(board, material_evaluator, 200, temperature=2.0).move_distribution(0)
    assert hot["d2d5"] < 0.5 and sum(p > 0 for p in hot.values()) > 5  # without the cutoff: mostly blunders
    guarded = analyse(board, material_evaluator, 200, temperature=2.0,
                      temperature_value_cutoff=0.1).move_distribution(0)
    assert guarded["d2d5"] == 1.0  # every other move loses the queen's worth of value: none is sampled


def test_a_small_temperature_samples_without_overflow() -> None:
    # Raw visits^(1/T) would overflow a double (60^(1/0.001)); the weights divide by the most visits first.
    tiny_t = _constructed(temperature=0.001).move_distribution(0)
    assert tiny_t == pytest.approx({"a2a4": 1.0, "a2a3": 0.0, "a1b1": 0.0, "a1b2": 0.0})
    assert all(math.isfinite(p) for p in tiny_t.values())


# --- games ----------------------------------------------------------------------------------------------------

def _fixed_network() -> Evaluator:
    """tiny's network (1 x 32) with fixed random weights, in float32: the same every call."""
    torch.manual_seed(93)
    return Evaluator(build_network(get_preset("tiny").network), "cpu", precision="float32")


def _games(network: Evaluator, seed: int, **settings: float) -> list[list[str]]:
    """Three self-play games without noise (only the temperature may tell them apart), 20 plies each."""
    params = SearchParams(simulations=8, ply_limit=20, add_noise=False, temperature_plies=6, temperature=0.0,
                          **settings)
    search = MultiGameSearch(3, params, seed=seed)
    return [record["moves"] for record in play_games(search, network.evaluate)]


def test_a_fixed_network_plays_other_games_with_the_endgame_temperature_and_the_same_without() -> None:
    network = _fixed_network()
    greedy = _games(network, seed=1)  # T = 0 throughout (the opening's temperature 0, no endgame temperature)
    assert len(greedy) == 3 and all(game == greedy[0] for game in greedy)
    assert _games(network, seed=2) == greedy  # no sampling: the seed does not matter

    warm = _games(network, seed=1, temperature_endgame=1.0)
    assert all(game[:6] == greedy[0][:6] for game in warm)  # the opening, at temperature 0, is the same ...
    assert len({" ".join(game) for game in warm}) > 1  # ... the temperature after it tells the games apart
    assert _games(network, seed=1, temperature_endgame=1.0) == warm  # deterministic given the seed
    other_seed = _games(network, seed=2, temperature_endgame=1.0)
    assert other_seed != warm and all(game[:6] == greedy[0][:6] for game in other_seed)


def test_gumbel_plays_the_same_games_whatever_the_temperature_settings() -> None:
    def games(**settings: float) -> list[list[str]]:
        params = SearchParams(algorithm="gumbel", simulations=8, ply_limit=20, **settings)
        return sorted(record["moves"] for record in play_games(MultiGameSearch(2, params, seed=5)))

    assert games(temperature_endgame=0.6, temperature_halflife=19.0, temperature_value_cutoff=0.1) == games()
    gumbel = MultiGameSearch(1, SearchParams(algorithm="gumbel", simulations=8, autoplay=False, gumbel_scale=0.0,
                                             temperature_endgame=1.0))
    gumbel.set_position(0, Board())
    run(gumbel, uniform_evaluator)
    distribution = gumbel.move_distribution(0)
    assert sorted(distribution.values())[-2:] == [0.0, 1.0] and distribution[gumbel.best_move(0)] == 1.0


# --- the settings' checks -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("override", "message"), [
    ("temperature_endgame=-0.1", "temperature_endgame must be at least 0, got -0.1"),
    ("temperature_halflife=-1", "temperature_halflife must be at least 0, got -1"),
    ("temperature_value_cutoff=1.5", r"temperature_value_cutoff must lie in \[0, 1\], got 1.5"),
    ("temperature=-1", "temperature must be at least 0, got -1"),
])
def test_bad_values_are_refused_by_name(override: str, message: str) -> None:
    name, text = override.split("=")
    with pytest.raises(ValueError, match=message):
        SearchParams(**{name: float(text)})
    with pytest.raises(UserError, match=f"search.{message}"):
        apply_overrides(get_preset("small"), [f"search.{override}"])


@pytest.mark.parametrize("name", ["temperature_endgame", "temperature_halflife", "temperature_value_cutoff"])
def test_numbers_that_are_not_finite_are_refused(name: str) -> None:
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match=f"{name} must be a finite number, got {bad}"):
            SearchParams(**{name: bad})
