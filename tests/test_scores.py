"""The value <-> centipawn mapping (lc0's formula), the one place engines and UCI share."""

from __future__ import annotations

import math

import chess
import chess.engine
import numpy as np
import pytest

from eval.scores import MAX_CENTIPAWNS, centipawns_to_value, score_to_value, value_to_centipawns, value_to_wdl


def test_known_values() -> None:
    # cp = 111.714640912 * tan(1.5620688421 * q)
    assert value_to_centipawns(0.0) == 0.0
    assert value_to_centipawns(0.5) == pytest.approx(110.7438831, abs=1e-6)
    assert value_to_centipawns(1.0) == pytest.approx(12800.0, abs=1e-3)
    assert MAX_CENTIPAWNS == pytest.approx(12800.0, abs=1e-3)
    # q = atan(cp / 111.714640912) / 1.5620688421
    assert centipawns_to_value(100.0) == pytest.approx(0.4674072553, abs=1e-9)
    assert centipawns_to_value(-100.0) == pytest.approx(-0.4674072553, abs=1e-9)


def test_round_trip() -> None:
    for q in np.linspace(-1.0, 1.0, 201):
        assert centipawns_to_value(value_to_centipawns(float(q))) == pytest.approx(q, abs=1e-12)
    for cp in np.linspace(-5000.0, 5000.0, 201):
        assert value_to_centipawns(centipawns_to_value(float(cp))) == pytest.approx(cp, rel=1e-9, abs=1e-9)


def test_monotone_and_odd() -> None:
    qs = np.linspace(-1.0, 1.0, 1001)
    cps = [value_to_centipawns(float(q)) for q in qs]
    assert all(b > a for a, b in zip(cps, cps[1:]))
    values = [centipawns_to_value(float(cp)) for cp in np.linspace(-12000, 12000, 1001)]
    assert all(b > a for a, b in zip(values, values[1:]))
    assert value_to_centipawns(-0.3) == -value_to_centipawns(0.3)


def test_clipping() -> None:
    assert value_to_centipawns(2.0) == value_to_centipawns(1.0)
    assert value_to_centipawns(-7.0) == value_to_centipawns(-1.0)
    assert centipawns_to_value(1e9) == 1.0
    assert centipawns_to_value(-1e9) == -1.0
    with pytest.raises(ValueError):
        value_to_centipawns(math.nan)
    with pytest.raises(ValueError):
        centipawns_to_value(math.nan)


def test_engine_scores() -> None:
    assert score_to_value(chess.engine.Mate(3)) == 1.0
    assert score_to_value(chess.engine.Mate(-2)) == -1.0
    assert score_to_value(chess.engine.MateGiven) == 1.0
    assert score_to_value(chess.engine.Mate(0)) == -1.0  # the side to move is mated
    assert score_to_value(chess.engine.Cp(100)) == centipawns_to_value(100.0)
    pov = chess.engine.PovScore(chess.engine.Cp(100), chess.WHITE)
    assert score_to_value(pov.pov(chess.BLACK)) == pytest.approx(-0.4674072553, abs=1e-9)


def test_wdl_sums_to_1000_and_keeps_the_expected_result() -> None:
    rng = np.random.default_rng(3)
    for q, draw in zip(rng.uniform(-1, 1, 500), [None, *rng.uniform(0, 1, 499)]):
        win, drawn, loss = value_to_wdl(float(q), None if draw is None else float(draw))
        assert win + drawn + loss == 1000 and min(win, drawn, loss) >= 0
        assert (win - loss) / 1000 == pytest.approx(q, abs=0.002)
    assert value_to_wdl(0.3) == (650, 0, 350)  # a scalar head: no draws
    assert value_to_wdl(0.3, 0.5) == (400, 500, 100)
    assert value_to_wdl(1.0, 0.5) == (1000, 0, 0) and value_to_wdl(-1.0) == (0, 0, 1000)
    with pytest.raises(ValueError):
        value_to_wdl(math.nan)
