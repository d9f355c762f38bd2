"""The UCI engine's options for the search's action-value settings (issue 68): FpuMode and GumbelUnvisited reach
the search (eval.uci_params), so a model file or a run whose config does not read the head's values can be
searched with them; `auto` keeps the network's own settings.

The network is the one tests/test_action_value_wiring.py uses (built the same way here): the tiny network with
its policy and value layers zeroed and a `logit` head, so that one PUCT simulation visits the move the head rates
highest when the search reads the head, and the first legal move (every move ties) when it does not.
"""

from __future__ import annotations

from pathlib import Path

import chess
import pytest
import torch

from alphazero.config import Config
from alphazero.nn.forward import Evaluator
from alphazero.presets import get_preset
from alphazero.store.checkpoint import save_checkpoint
from alphazero.store.rundir import RunDir
from eval.uci_options import OPTIONS_BY_NAME
from mcts_ext import Board
from mcts_ext.encode import encode_boards, legal_move_indices, new_batch
from mcts_ext.params import FPU_MODES, GUMBEL_UNVISITED
from tests.helpers import engine_with_spies, go_nodes, zeroed_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = get_preset("tiny")
PUCT_READS = ("search.algorithm=puct", "search.fpu_mode=action_value")


@pytest.fixture(scope="module")
def zeroed() -> torch.nn.Module:
    """The tiny network with equal priors and values 0 everywhere and a head whose values differ by move."""
    return zeroed_model()


def _head_choice(model: torch.nn.Module, board: chess.Board) -> str:
    """The legal move the head rates highest (what one simulation that reads the head visits)."""
    mcts_board = Board(board.fen())
    planes, scalars = new_batch(1)
    encode_boards([mcts_board], planes, scalars)
    wins = Evaluator(model, "cpu", precision="float32").evaluate_action_values(planes, scalars)[0]
    by_move = {uci: float(wins[index]) for uci, index in zip(mcts_board.legal_moves(), legal_move_indices(mcts_board))}
    ranked = sorted(by_move, key=by_move.__getitem__, reverse=True)
    assert by_move[ranked[0]] - by_move[ranked[1]] > 1e-3, "the head's best move must stand out: choose another seed"
    return ranked[0]


def _plain_choice(board: chess.Board) -> str:
    """The move one PUCT simulation visits where every move ties (the first-play reduction, equal priors)."""
    return Board(board.fen()).legal_moves()[0]


def _engine_run(path: Path, model: torch.nn.Module, *overrides: str) -> RunDir:
    """A run whose config holds ``overrides`` (with the head) and whose checkpoint is ``model``."""
    run, config = RunDir.create_or_open(path, TINY, ["network.action_value_head=logit", *overrides])
    assert isinstance(config, Config)
    save_checkpoint(run, model, None, 1, config)
    return run


def _bestmove(text: str) -> str:
    return [line for line in text.splitlines() if line.startswith("bestmove")][-1].split()[1]


def test_the_options_offer_the_searchs_choices_and_auto() -> None:
    assert OPTIONS_BY_NAME["fpumode"].choices == ("auto", *FPU_MODES)
    assert OPTIONS_BY_NAME["gumbelunvisited"].choices == ("auto", *GUMBEL_UNVISITED)
    assert OPTIONS_BY_NAME["fpumode"].default == OPTIONS_BY_NAME["gumbelunvisited"].default == "auto"


def test_fpu_mode_action_value_makes_the_engine_ask_for_and_play_by_the_heads_values(
        tmp_path: Path, zeroed: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _engine_run(tmp_path / "plain", zeroed, "search.algorithm=puct")  # its config reads no action values
    engine, out, spies = engine_with_spies(run, monkeypatch)
    board = chess.Board()
    go_nodes(engine, board.fen(), 1)
    [asked] = spies
    assert asked and not any(asked) and _bestmove(out.getvalue()) == _plain_choice(board)
    engine.handle("setoption name FpuMode value action_value")
    asked.clear()
    go_nodes(engine, board.fen(), 1)
    search = engine._search
    assert search is not None and search.reads_action_values
    assert asked and all(asked) and _bestmove(out.getvalue()) == _head_choice(zeroed, board)
    engine.handle("setoption name FpuMode value auto")  # back to the run's own: the reduction
    asked.clear()
    go_nodes(engine, board.fen(), 1)
    assert asked and not any(asked) and _bestmove(out.getvalue()) == _plain_choice(board)
    engine.run()


def test_the_options_override_a_run_config_that_reads_them(
        tmp_path: Path, zeroed: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, out, spies = engine_with_spies(_engine_run(tmp_path / "reads", zeroed, *PUCT_READS), monkeypatch)
    engine.handle("setoption name FpuMode value reduction")
    go_nodes(engine, chess.STARTING_FEN, 1)
    [asked] = spies
    assert asked and not any(asked) and _bestmove(out.getvalue()) == _plain_choice(chess.Board())
    engine.run()


def test_gumbel_unvisited_action_value_makes_a_gumbel_search_ask(
        tmp_path: Path, zeroed: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _engine_run(tmp_path / "gumbel", zeroed, "search.algorithm=gumbel")
    engine, _, spies = engine_with_spies(run, monkeypatch)
    engine.handle("setoption name GumbelUnvisited value action_value")
    go_nodes(engine, chess.STARTING_FEN, 16)
    [asked] = spies
    search = engine._search
    assert search is not None and search.algorithm == "gumbel" and search.reads_action_values
    assert asked and all(asked)
    engine.run()


def test_a_bad_value_is_refused_and_the_old_one_kept(tmp_path: Path, zeroed: torch.nn.Module,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    engine, out, _ = engine_with_spies(_engine_run(tmp_path / "run", zeroed, "search.algorithm=puct"), monkeypatch)
    engine.handle("setoption name FpuMode value sometimes")
    assert "info string ignored: FpuMode takes one of auto, reduction, absolute, action_value" in out.getvalue()
    assert engine.values["FpuMode"] == "auto"
    engine.run()
