"""Elo arithmetic: match summaries with intervals, LOS, and anchored BayesElo-style fits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eval.elo import elo_from_score, fit_ratings, likelihood_of_superiority, match_summary, score_from_elo


def test_elo_curve() -> None:
    assert score_from_elo(0.0) == 0.5
    assert elo_from_score(0.5) == 0.0
    assert elo_from_score(0.75) == pytest.approx(400 * math.log10(3))  # odds 3:1
    assert score_from_elo(elo_from_score(0.3)) == pytest.approx(0.3)
    assert elo_from_score(1.0) == math.inf
    assert elo_from_score(0.0) == -math.inf
    with pytest.raises(ValueError):
        elo_from_score(1.5)


def test_interval_by_hand() -> None:
    # 60 wins, 20 draws, 20 losses; n = 100.
    # score s = (60 + 10) / 100 = 0.7
    # variance per game = (60 * 0.3^2 + 20 * 0.2^2 + 20 * 0.7^2) / 100 = (5.4 + 0.8 + 9.8) / 100 = 0.16
    # standard error = sqrt(0.16 / 100) = 0.04; 1.96 * 0.04 = 0.0784 -> s in [0.6216, 0.7784]
    # Elo = 400 log10(s / (1 - s)):  0.7 -> 400 log10(2.3333) = 147.19
    #                                0.6216014 -> 400 log10(1.64271) = 86.23
    #                                0.7783986 -> 400 log10(3.51261) = 218.25
    # LOS = 0.5 (1 + erf(40 / sqrt(2 * 80))) = 0.5 (1 + erf(3.1623)) = 0.9999961
    s = match_summary(60, 20, 20)
    assert s.games == 100
    assert s.score == pytest.approx(0.7)
    assert s.elo == pytest.approx(147.19, abs=0.01)
    assert s.elo_low == pytest.approx(86.23, abs=0.01)
    assert s.elo_high == pytest.approx(218.25, abs=0.01)
    assert s.los == pytest.approx(0.9999961, abs=1e-7)


def test_los_sanity() -> None:
    assert likelihood_of_superiority(10, 10) == 0.5
    assert likelihood_of_superiority(0, 0) == 0.5
    assert likelihood_of_superiority(11, 9) > 0.5
    assert likelihood_of_superiority(11, 9) + likelihood_of_superiority(9, 11) == pytest.approx(1.0)
    assert likelihood_of_superiority(30, 10) > likelihood_of_superiority(12, 10)
    # Draws carry no information on who is stronger.
    assert match_summary(12, 50, 10).los == match_summary(12, 0, 10).los
    # One win, no losses: 0.5 (1 + erf(1 / sqrt(2))) = 0.8413 (one standard deviation).
    assert match_summary(1, 0, 0).los == pytest.approx(0.841345, abs=1e-6)


def test_perfect_and_zero_scores() -> None:
    win = match_summary(10, 0, 0)
    assert win.score == 1.0 and win.elo == math.inf and win.elo_high == math.inf
    # Exact binomial lower bound: 0.025^(1/10) = 0.6915 -> +140 Elo.
    assert win.elo_low == pytest.approx(elo_from_score(0.025 ** 0.1))
    assert 139 < win.elo_low < 141  # type: ignore[operator]
    loss = match_summary(0, 0, 10)
    assert loss.elo == -math.inf and loss.elo_low == -math.inf
    assert loss.elo_high == pytest.approx(-win.elo_low)  # type: ignore[operator]
    assert loss.los < 0.001


def test_no_games_and_only_draws() -> None:
    empty = match_summary(0, 0, 0)
    assert (empty.games, empty.score, empty.elo, empty.elo_low, empty.elo_high, empty.los) == \
        (0, None, None, None, None, 0.5)
    draws = match_summary(0, 7, 0)
    assert (draws.elo, draws.elo_low, draws.elo_high, draws.los) == (0.0, 0.0, 0.0, 0.5)
    with pytest.raises(ValueError):
        match_summary(-1, 0, 0)


def test_interval_clips_to_infinity() -> None:
    # 3 wins and a draw: the upper score bound passes 1.
    s = match_summary(3, 1, 0)
    assert s.elo_high == math.inf and math.isfinite(s.elo_low)  # type: ignore[arg-type]


TRUE = {"A": 1500.0, "B": 1700.0, "C": 1300.0, "D": 1900.0}
DRAW_ELO = 150.0


def _simulate(rng: np.random.Generator, games_per_pair: int) -> list[tuple[str, str, float]]:
    """Plays a round robin under BayesElo's model with the TRUE ratings and DRAW_ELO."""
    names, games = sorted(TRUE), []
    for k, a in enumerate(names):
        for b in names[k + 1 :]:
            d = TRUE[a] - TRUE[b]
            p_win, p_loss = score_from_elo(d - DRAW_ELO), score_from_elo(-d - DRAW_ELO)
            u = rng.random(games_per_pair)
            scores = np.where(u < p_win, 1.0, np.where(u < p_win + p_loss, 0.0, 0.5))
            games += [(a, b, float(s)) for s in scores]
    return games


def test_fit_recovers_known_ratings() -> None:
    games = _simulate(np.random.default_rng(1), 1000)  # 6000 games
    ratings = fit_ratings(games, {"A": 1500.0})
    assert ratings["A"].elo == 1500.0 and ratings["A"].low == ratings["A"].high == 1500.0
    for name in "BCD":
        r = ratings[name]
        assert r.low <= TRUE[name] <= r.high, (name, r)
        assert 10 < r.high - r.elo < 40  # about +-20 Elo from 3000 games each
        assert r.games == 3000
    assert ratings.draw_elo == pytest.approx(DRAW_ELO, abs=15)


def test_fit_intervals_cover() -> None:
    # Over 40 simulated tournaments the 95% intervals should hold the truth ~95% of the time.
    hits = 0
    for seed in range(40):
        ratings = fit_ratings(_simulate(np.random.default_rng(100 + seed), 150), {"A": 1500.0})
        hits += sum(ratings[n].low <= TRUE[n] <= ratings[n].high for n in "BCD")
    assert hits / 120 >= 0.85


def test_fit_with_fixed_draw_elo_and_two_anchors() -> None:
    games = _simulate(np.random.default_rng(2), 500)
    ratings = fit_ratings(games, {"A": 1500.0, "D": 1900.0}, draw_elo=DRAW_ELO)
    assert ratings["D"].elo == 1900.0
    assert ratings.draw_elo == DRAW_ELO
    for name in "BC":
        assert ratings[name].low <= TRUE[name] <= ratings[name].high


def test_perfect_score_stays_finite() -> None:
    games = [("hero", "anchor", 1.0)] * 20 + [("anchor", "zero", 1.0)] * 20
    ratings = fit_ratings(games, {"anchor": 1500.0})
    hero, zero = ratings["hero"], ratings["zero"]
    assert all(math.isfinite(x) for x in (hero.elo, hero.low, hero.high, zero.elo, zero.low, zero.high))
    assert hero.elo > 1800 and zero.elo < 1200
    assert math.isfinite(ratings.draw_elo) and ratings.draw_elo > 0


def test_even_score_against_anchor() -> None:
    ratings = fit_ratings([("x", "y", 1.0), ("x", "y", 0.5), ("x", "y", 0.0)], {"y": 2000.0})
    assert ratings["x"].elo == pytest.approx(2000.0, abs=1e-6)


def test_disconnected_players_raise() -> None:
    games = [("a", "b", 1.0), ("c", "d", 0.5), ("d", "e", 0.0)]
    with pytest.raises(ValueError, match=r"'c', 'd', 'e'.*anchor"):
        fit_ratings(games, {"a": 1500.0})


@pytest.mark.parametrize(
    ("games", "anchors", "message"),
    [
        ([("a", "b", 1.0)], {}, "at least one anchor"),
        ([("a", "b", 0.7)], {"a": 1500.0}, "1, 0.5 or 0"),
        ([("a", "a", 1.0)], {"a": 1500.0}, "cannot play itself"),
    ],
)
def test_bad_input_raises(games: list[tuple[str, str, float]], anchors: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fit_ratings(games, anchors)
