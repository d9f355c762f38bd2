"""`alphazero pretrain`: PGN games and Stockfish labels as shards, training on them, resuming after a kill."""

from __future__ import annotations

import bz2
import gzip
import io
import math
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import chess
import chess.engine
import chess.pgn
import numpy as np
import pytest
import torch

from alphazero.app import cli
from alphazero.chess.moves import legal_move_indices, move_to_index
from alphazero.chess.pgn_reader import (
    SKIP_ILLEGAL,
    SKIP_NO_RESULT,
    SKIP_NONSTANDARD_START,
    SKIP_VARIANT,
    PgnGame,
    comment_eval,
    game_record,
    open_text,
    read_games,
)
from alphazero.chess.scores import win_probability as scores_win_probability
from alphazero.config import PretrainConfig
from alphazero.errors import UserError
from alphazero.nn.network import AlphaZeroNet
from alphazero.presets import get_preset
from alphazero.store.checkpoint import latest_checkpoint
from alphazero.store.rundir import RunDir
from alphazero.store.shards import (
    VALUE_FROM_ROOT,
    Shard,
    concatenate,
    game_ids,
    list_shards,
    read_shard,
    read_shard_meta,
    value_targets,
)
from alphazero.store.sources import read_weights
from eval.uci import UciEngine
from learner.labels import (
    MATE_HORIZON,
    LabelSettings,
    endgame_start,
    label_positions,
    mate_bonus,
    policy_target,
    puzzle_keys,
    win_probability,
)
from learner.pgn_data import convert_pgn
from learner.position_files import file_positions as _file_positions
from learner.replay import ReplayWindow, is_validation_game
from learner.trainer import Trainer
from mcts_ext import Board
from tests.helpers import kill_at_first_shard, old_tiny, stockfish_or_skip
from tests.reference_encoder import reference_compact

ROOT = Path(__file__).resolve().parent.parent
GAMES = ROOT / "tests" / "data" / "pretrain_games.pgn"
NOTICE = "Trained on TCEC games (github.com/TCEC-Chess/tcecgames), CC BY-SA 3.0; these weights: CC BY-SA 3.0"
POSITIONS = ROOT / "tests" / "data" / "pretrain_positions.epd"
# The games of GAMES that are read, by number, with their plies; the others are skipped (game 3, from a
# set-up position, as a non-standard start).
READ = {1: 7, 6: 131, 7: 8}
SKIPPED = {SKIP_ILLEGAL: 1, SKIP_NONSTANDARD_START: 1, SKIP_VARIANT: 1, SKIP_NO_RESULT: 1}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _games(path: Path) -> list[PgnGame | str]:
    with open_text(path) as handle:
        return list(read_games(handle))


def _all_samples(directory: Path):
    return concatenate(read_shard(path) for path in list_shards(directory))


# --- reading PGN -------------------------------------------------------------------------------------


def test_pgn_mainlines_skip_variations_comments_nags_and_broken_games() -> None:
    items = _games(GAMES)
    games = {item.number: item for item in items if isinstance(item, PgnGame)}
    assert {number: len(game.moves) for number, game in games.items()} == READ
    assert Counter(item for item in items if isinstance(item, str)) == SKIPPED
    # Variations (1... c5, 2... Nf6, 3... g6), comments and NAGs leave the mainline alone.
    assert games[1].moves == ["e2e4", "e7e5", "f1c4", "b8c6", "d1h5", "g8f6", "h5f7"]
    assert games[1].result == "1-0"
    assert games[1].evals == [None] * 7 and games[1].malformed_evals == 0  # comments without an evaluation
    assert items[2] == SKIP_NONSTANDARD_START  # game 3 starts from a set-up position
    assert games[7].result == "1/2-1/2"


def test_compressed_pgn_reads_the_same_games(tmp_path: Path) -> None:
    text = GAMES.read_bytes()
    (tmp_path / "g.pgn.gz").write_bytes(gzip.compress(text))
    (tmp_path / "g.pgn.bz2").write_bytes(bz2.compress(text))
    names = ["g.pgn.gz", "g.pgn.bz2"]
    if shutil.which("zstd"):
        subprocess.run(["zstd", "-q", "-o", str(tmp_path / "g.pgn.zst"), str(GAMES)], check=True)
        names.append("g.pgn.zst")
    expected = [(g.number, g.moves) if isinstance(g, PgnGame) else g for g in _games(GAMES)]
    for name in names:
        assert [(g.number, g.moves) if isinstance(g, PgnGame) else g for g in _games(tmp_path / name)] == expected


def test_zst_without_zstandard_or_zstd_says_how_to_get_them(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "g.pgn.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard fails
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="zstandard.*zstd"):
        _games(tmp_path / "g.pgn.zst")


def test_damaged_and_missing_files_are_messages_not_tracebacks(tmp_path: Path, capsys) -> None:
    damaged = tmp_path / "cut.pgn.gz"
    data = gzip.compress(GAMES.read_bytes() * 20)
    damaged.write_bytes(data[: len(data) * 2 // 3])
    report = convert_pgn(tmp_path / "pretrain", [str(damaged)], progress=False)
    assert report.damaged and "cut.pgn.gz" in report.damaged[0]
    assert 1 <= report.games < 20 * len(READ)  # the games read before the damage are kept
    assert sum(len(read_shard(path)) for path in list_shards(tmp_path / "pretrain")) == report.positions
    if shutil.which("zstd"):
        whole = tmp_path / "whole.pgn.zst"
        subprocess.run(["zstd", "-q", "-o", str(whole), str(GAMES)], check=True)
        cut = tmp_path / "cut.pgn.zst"
        cut.write_bytes(whole.read_bytes()[:-40])
        report = convert_pgn(tmp_path / "zst", [str(cut)], progress=False)
        assert report.damaged and "zstd failed" in report.damaged[0]
    run = tmp_path / "run"
    assert cli.main(["pretrain", "--run", str(run), "--pgn", str(tmp_path / "missing.pgn"), "--quiet"]) == 2
    assert "missing.pgn does not exist" in capsys.readouterr().err


# --- PGN samples ------------------------------------------------------------------------------------------


def test_pgn_samples_agree_with_the_reference_encoder_and_python_chess(tmp_path: Path) -> None:
    report = convert_pgn(tmp_path / "pretrain", [str(GAMES)], shard_positions=50, progress=False)
    assert report.games == len(READ) and report.positions == sum(READ.values())
    assert report.skipped == Counter(SKIPPED)
    shard = _all_samples(tmp_path / "pretrain")
    assert len(shard) == sum(READ.values())
    targets = value_targets(shard)
    for row in range(len(shard)):
        game = shard.games[int(shard.game[row])]
        ply = int(shard.ply[row])
        board = chess.Board(game["start_fen"])
        for uci in game["moves"][:ply]:
            board.push_uci(uci)
        planes, scalars = reference_compact(board)
        np.testing.assert_array_equal(shard.planes[row], planes)
        np.testing.assert_array_equal(shard.scalars[row], scalars)
        lo, hi = shard.policy_offsets[row], shard.policy_offsets[row + 1]
        assert sorted(shard.policy_indices[lo:hi].tolist()) == sorted(legal_move_indices(board).tolist())
        played = move_to_index(chess.Move.from_uci(game["moves"][ply]), board.turn)
        assert dict(zip(shard.policy_indices[lo:hi].tolist(), shard.policy_probs[lo:hi].tolist()))[played] == 1.0
        white = {"1-0": 1, "0-1": -1, "1/2-1/2": 0}[game["result"]]
        assert targets[row] == (white if board.turn == chess.WHITE else -white)


def test_pgn_conversion_resumes_after_the_last_written_shard(tmp_path: Path) -> None:
    directory = tmp_path / "pretrain"
    first = convert_pgn(directory, [str(GAMES)], shard_positions=5, progress=False)
    shards = list_shards(directory)
    assert len(shards) == 4 and read_shard_meta(shards[-1])["complete"]  # games 1; 2 to 6; 7; the end
    for path in shards[1:]:  # as if killed after the first shard
        path.unlink()
    again = convert_pgn(directory, [str(GAMES)], shard_positions=5, progress=False)
    assert again.games == 2 and again.skipped == Counter(SKIPPED)  # games 2 to 7
    shard = _all_samples(directory)
    assert len(shard) == first.positions
    assert sorted(game_ids(shard.games, "any.npz")) == [f"pretrain_games.pgn:{n}" for n in sorted(READ)]
    assert convert_pgn(directory, [str(GAMES)], progress=False).files_done_before == 1


def test_pgn_smoothing_spreads_part_of_the_target_over_the_legal_moves(tmp_path: Path) -> None:
    convert_pgn(tmp_path / "pretrain", [str(GAMES)], smoothing=0.25, progress=False)
    shard = _all_samples(tmp_path / "pretrain")
    lo, hi = shard.policy_offsets[0], shard.policy_offsets[1]  # the start position: 20 moves
    probs = np.sort(shard.policy_probs[lo:hi])
    assert probs[-1] == pytest.approx(0.75 + 0.25 / 20) and probs[0] == pytest.approx(0.25 / 20)


@pytest.mark.slow
def test_pretrain_on_pgn_trains_and_a_rerun_resumes(tmp_path: Path, capsys) -> None:
    run = RunDir(tmp_path / "run")
    # A share at which games 6 and 7 are held out (by their ids): training goes on with the others.
    args = ["pretrain", "--run", str(run.root), "--pgn", str(GAMES), "--steps", "4", "--quiet",
            "--set", "learner.batch_size=16", "--set", "learner.log_every=2", "--set", "learner.validation_share=0.3",
            "--export", str(tmp_path / "net.pt"), "--notice", NOTICE]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "3 games (146 positions)" in out and "skipped 4 games" in out
    assert latest_checkpoint(run).name == "step_000000004.pt"
    assert (tmp_path / "net.pt").is_file() and list((run.tb / "learner").iterdir())
    # The attribution a licence of the data asks for travels in the file, and where the network is described.
    assert read_weights(tmp_path / "net.pt").notice == NOTICE
    engine, err = io.StringIO(), io.StringIO()
    UciEngine(None, str(tmp_path / "net.pt"), "cpu", stdin=io.StringIO("uci\nisready\nquit\n"), stdout=engine,
              stderr=err, threads=1).run()
    assert f"info string network notice: {NOTICE}" in engine.getvalue().splitlines()
    shards = list_shards(run.pretrain)
    assert [is_validation_game(f"pretrain_games.pgn:{n}", 0.3) for n in sorted(READ)] == [False, True, True]
    assert cli.main([*args[:6], "6", *args[7:-2]]) == 0  # the same data, two more steps
    assert "0 games (0 positions)" in capsys.readouterr().out and list_shards(run.pretrain) == shards
    assert latest_checkpoint(run).name == "step_000000006.pt"


def test_a_notice_needs_an_export_and_text(tmp_path: Path, capsys) -> None:
    base = ["pretrain", "--run", str(tmp_path / "run"), "--pgn", str(GAMES), "--steps", "1"]
    for extra in (["--notice", NOTICE], ["--export", str(tmp_path / "net.pt"), "--notice", " "]):
        assert cli.main([*base, *extra]) == 2
        assert "--notice TEXT goes with --export FILE" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_pretrain_minutes_ends_training_without_a_step_limit(tmp_path: Path, capsys) -> None:
    run = RunDir(tmp_path / "run")
    args = ["pretrain", "--run", str(run.root), "--pgn", str(GAMES), "--minutes", "0.05",
            "--set", "learner.batch_size=16", "--set", "learner.training_steps=0"]
    assert cli.main(args) == 0  # no --steps and no training_steps: only the clock ends it
    assert "until 0.05 minutes" in capsys.readouterr().out
    assert latest_checkpoint(run) is not None
    assert cli.main([*args[:6], "0", *args[7:]]) == 2
    assert "--minutes must be positive" in capsys.readouterr().err


# --- evaluations in PGN comments --------------------------------------------------------------------------

# Games with evaluations in their comments, each with what read_games makes of it.
EVAL_PGN = """[Event "Lichess annotations: the comment before the first move and in the variation value nothing"]
[Result "1-0"]

{ [%eval 9.99] } 1. e4 { [%eval 0.17] [%clk 0:03:00] } 1... e5 { [%eval 0.2,23] [%clk 0:03:00] }
2. Bc4 { [%eval 0.4] } { [%clk 0:02:59] } 2... Nc6 { [%eval -1.25,23] } 3. Qh5 { [%eval x] } 3... Nf6
(3... g6 { [%eval 0.5] } 4. Qf3) { [%eval #1] } 4. Qxf7# { [%eval #0] } 1-0

[Event "TCEC"]
[Result "1/2-1/2"]

1. d4 {book, mb=+0+0+0+0+0,} 1... d5 {book, mb=+0+0+0+0+0,} 2. c4 {d=34, sd=34, mt=120609, tl=1682391,
s=42612199, n=5139372176, pv=e6 Nc3, tb=59, h=57.2, ph=0.0, wv=1.38, R50=48, Rd=-11, Rr=-1000,
mb=-1+0+0+0+0,} 2... e6 {d=30, wv=-0.5, R50=50,} 3. Nc3 {d=1, wv=abc,} 3... Nf6 {d=2, wv=,} 4. Bg5 {wv=-M5,}
4... Be7 {wv=M5,} 5. e3 {wv=#21,} 5... O-O {wv=-#21,} 6. Nf3 1/2-1/2

[Event "No comments"]
[Result "0-1"]

1. f3 e5 2. g4 Qh4# 0-1

[Event "TCEC Chess960"]
[Result "1-0"]
[Variant "fischerandom"]
[SetUp "1"]
[FEN "bqnb1rkr/pp3ppp/3ppn2/2p5/5P2/P2P4/NPP1P1PP/BQ1BNRKR w HFhf - 2 9"]

9. g3 {wv=0.31,} d5 {wv=0.40,} 10. Nf3 {wv=0.52,} 1-0

[Event "A set-up position"]
[Result "1-0"]
[SetUp "1"]
[FEN "8/8/8/4k3/8/8/8/3QK3 b - - 0 1"]

1... Ke4 { [%eval #7] } 2. Qd3+ { [%eval #6] } 1-0

[Event "Unfinished"]
[Result "*"]

1. e4 { [%eval 0.3] } 1... c5 { [%eval 0.35] } *

[Event "The standard start, set up"]
[Result "1/2-1/2"]
[SetUp "1"]
[FEN "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"]

1. Nf3 { [%eval 0.1] } 1... Nf6 { wv=0.05, } 1/2-1/2
"""
EVAL_SKIPPED = {4: SKIP_VARIANT, 5: SKIP_NONSTANDARD_START, 6: SKIP_NO_RESULT}
# White's scores after each move of the TCEC game: book moves and malformed wv= have none.
TCEC_SCORES = [None, None, chess.engine.Cp(138), chess.engine.Cp(-50), None, None, chess.engine.Mate(-5),
               chess.engine.Mate(5), chess.engine.Mate(21), chess.engine.Mate(-21), None]
EVAL_MALFORMED = {1: 1, 2: 2, 3: 0, 7: 0}  # kept games: malformed evaluation comments


def _oracle_games(text: str) -> list[chess.pgn.Game]:
    handle, games = io.StringIO(text), []
    while (game := chess.pgn.read_game(handle)) is not None:
        games.append(game)
    return games


def _white_scores(game: chess.pgn.Game) -> list[chess.engine.Score | None]:
    """White's score after each mainline move: python-chess's node.eval(), or TCEC's wv= as TCEC_SCORES has it."""
    if game.headers["Event"] == "TCEC":
        return TCEC_SCORES
    scores = []
    for node in game.mainline():
        score = node.eval()
        if score is None and "wv=" in node.comment:
            score = chess.engine.PovScore(chess.engine.Cp(round(float(node.comment.split("wv=")[1].split(",")[0])
                                                                  * 100)), chess.WHITE)
        scores.append(None if score is None else score.white())
    return scores


def _expected_values(game: chess.pgn.Game) -> tuple[list[float], int]:
    """The value target of each position before a move (the mover's 2 w - 1 of the previous move's evaluation,
    else the result), computed with python-chess; and how many came from an evaluation."""
    white = {"1-0": 1, "0-1": -1, "1/2-1/2": 0}[game.headers["Result"]]
    scores = _white_scores(game)
    values, evaluated = [], 0
    for ply, node in enumerate(game.mainline()):
        board = node.parent.board()  # the position before the move
        score = scores[ply - 1] if ply > 0 else None
        if score is None:
            values.append(float(white if board.turn == chess.WHITE else -white))
        else:
            mover = chess.engine.PovScore(score, chess.WHITE).pov(board.turn)
            values.append(2 * scores_win_probability(mover) - 1)
            evaluated += 1
    return values, evaluated


@pytest.mark.parametrize(("comment", "white", "malformed"), [
    ("d=34, sd=34, pv=Bc4 Nh6 d4, tb=59, h=57.2, ph=0.0, wv=1.38, R50=48, Rd=-11, Rr=-1000, mb=-1+0+0+0+0,",
     chess.engine.Cp(138), False),
    ("d=30, wv=-0.5,", chess.engine.Cp(-50), False),
    ("wv=M5,", chess.engine.Mate(5), False),
    ("wv=-M5,", chess.engine.Mate(-5), False),
    ("wv=#21,", chess.engine.Mate(21), False),
    ("wv=-#21,", chess.engine.Mate(-21), False),
    ("[%eval 0.17] [%clk 0:03:00]", chess.engine.Cp(17), False),
    ("[%eval #-3]", chess.engine.Mate(-3), False),
    ("[%eval -1.25,23]", chess.engine.Cp(-125), False),
    ("[%eval 0.5] d=3, wv=2.0,", chess.engine.Cp(50), False),  # [%eval] first
    ("book, mb=+0+0+0+0+0,", None, False),
    ("[%clk 0:03:00]", None, False),
    ("", None, False),
    ("d=1, wv=abc,", None, True),
    ("d=1, wv=,", None, True),
    ("[%eval x]", None, True),
    ("[%eval] wv=1.0,", None, True),  # a malformed [%eval] is not replaced by wv=
])
def test_an_evaluation_in_a_comment_is_white_s_score(comment: str, white: chess.engine.Score | None,
                                                     malformed: bool) -> None:
    for turn in (chess.WHITE, chess.BLACK):  # the side to move after the move changes nothing but a mate in 0
        score, bad = comment_eval(comment, turn)
        assert bad is malformed
        if white is None:
            assert score is None
        else:
            assert score is not None and score.white() == white


def test_a_mate_in_0_is_the_side_to_move_mated() -> None:
    for comment in ("[%eval #0]", "wv=M0,"):
        assert comment_eval(comment, chess.BLACK) == (chess.engine.PovScore(chess.engine.Mate(0), chess.BLACK), False)
        score, _ = comment_eval(comment, chess.WHITE)
        assert score is not None and score.white() == chess.engine.Mate(0) and score.black() == chess.engine.MateGiven


def test_pgn_evaluations_and_skips_agree_with_python_chess() -> None:
    items = list(read_games(io.StringIO(EVAL_PGN)))
    oracles = _oracle_games(EVAL_PGN)
    assert len(items) == len(oracles) == 7
    for number, (item, oracle) in enumerate(zip(items, oracles, strict=True), 1):
        if number in EVAL_SKIPPED:
            assert item == EVAL_SKIPPED[number]
            assert oracle.board().chess960 or oracle.board().fen() != chess.STARTING_FEN \
                or oracle.headers["Result"] == "*"
            continue
        assert isinstance(item, PgnGame) and item.number == number
        nodes = list(oracle.mainline())
        assert item.moves == [node.move.uci() for node in nodes]
        assert item.result == oracle.headers["Result"] and item.start_fen == chess.STARTING_FEN
        assert len(item.evals) == len(nodes) and item.malformed_evals == EVAL_MALFORMED[number]
        for ours, node in zip(item.evals, nodes, strict=True):
            if "wv=" not in node.comment:
                assert ours == node.eval(), node.comment  # [%eval]: python-chess's score of the node's position
        assert [None if s is None else s.white() for s in item.evals] == _white_scores(oracle)
    lichess = items[0]
    assert isinstance(lichess, PgnGame)
    # The comment before 1. e4 (9.99) and the one inside the variation (0.5) value no move; the one after the
    # variation is Nf6's; two comments after a move are read as one.
    assert lichess.evals[0] == chess.engine.PovScore(chess.engine.Cp(17), chess.WHITE)
    assert lichess.evals[2] == chess.engine.PovScore(chess.engine.Cp(40), chess.WHITE)
    assert lichess.evals[4] is None
    assert lichess.evals[5] == chess.engine.PovScore(chess.engine.Mate(1), chess.WHITE)


def test_pgn_value_targets_are_the_previous_move_s_evaluation_for_the_side_to_move() -> None:
    games = [item for item in read_games(io.StringIO(EVAL_PGN)) if isinstance(item, PgnGame)]
    oracles = {number: game for number, game in enumerate(_oracle_games(EVAL_PGN), 1)}
    for game in games:
        record = game_record(game)
        expected, evaluated = _expected_values(oracles[game.number])
        np.testing.assert_allclose(record["root_values"], expected, rtol=1e-6, atol=1e-7)
        assert record["evals"] == evaluated
        white = {"1-0": 1, "0-1": -1, "1/2-1/2": 0}[game.result]
        assert record["results"].dtype == np.int8
        np.testing.assert_array_equal(record["results"], [white if ply % 2 == 0 else -white
                                                          for ply in range(len(game.moves))])
        plain = game_record(game, use_evals=False)
        np.testing.assert_array_equal(plain["root_values"], record["results"].astype(np.float32))
        assert plain["evals"] == 0
    lichess, tcec, no_comments = games[:3]
    values = game_record(lichess)["root_values"]
    # After 1. e4 {+0.17}, Black to move: Black's side of White's +0.17; after 1... e5 {+0.20}, White's.
    assert values[1] == pytest.approx(2 * scores_win_probability(chess.engine.Cp(-17)) - 1) and values[1] < 0
    assert values[2] == pytest.approx(2 * scores_win_probability(chess.engine.Cp(20)) - 1) and values[2] > 0
    assert values[0] == 1.0 and values[5] == -1.0  # the result: no (readable) evaluation
    assert values[6] == 1.0  # White mates in 1, White to move
    # A mate for Black with Black to move, for White with White to move, for White with Black to move, ...
    np.testing.assert_array_equal(game_record(tcec)["root_values"][7:], [1.0, 1.0, -1.0, -1.0])
    assert game_record(tcec)["evals"] == 6 and game_record(no_comments)["evals"] == 0


def test_pgn_conversion_values_positions_by_their_evaluations(tmp_path: Path) -> None:
    source = tmp_path / "engine_games.pgn"
    source.write_text(EVAL_PGN)
    oracles = {f"engine_games.pgn:{number}": game for number, game in enumerate(_oracle_games(EVAL_PGN), 1)}
    report = convert_pgn(tmp_path / "eval", [str(source)], shard_positions=8, progress=False)
    assert report.games == 4  # the games with malformed comments are kept
    assert report.skipped == Counter(EVAL_SKIPPED.values())
    assert report.malformed_evals == 3 and report.evaluated == 5 + 6 + 0 + 1  # not the last move's
    assert report.positions == 7 + 11 + 4 + 2
    assert "12 of 24 positions valued by an engine's evaluation; 3 malformed evaluations ignored" \
        in report.summary(tmp_path / "eval")
    shards = [read_shard(path) for path in list_shards(tmp_path / "eval")]
    assert len(shards) > 1 and all(shard.meta["value_target"] == VALUE_FROM_ROOT for shard in shards)
    for shard in shards:
        targets = value_targets(shard)
        for row in range(len(shard)):
            game = shard.games[int(shard.game[row])]
            expected, _ = _expected_values(oracles[game["game_id"]])
            assert targets[row] == pytest.approx(expected[int(shard.ply[row])], abs=1e-6)
            white = {"1-0": 1, "0-1": -1, "1/2-1/2": 0}[game["result"]]
            assert shard.results[row] == (white if int(shard.ply[row]) % 2 == 0 else -white)
    plain = convert_pgn(tmp_path / "result", [str(source)], progress=False, use_evals=False)
    assert plain.evaluated == 0 and plain.positions == report.positions
    shard = _all_samples(tmp_path / "result")
    assert "value_target" not in shard.meta
    np.testing.assert_array_equal(value_targets(shard), shard.results)


def test_win_probability_lives_in_one_place() -> None:
    assert win_probability is scores_win_probability
    assert scores_win_probability(chess.engine.MateGiven) == 1.0 and scores_win_probability(chess.engine.Mate(0)) == 0.0


# --- Stockfish labels ------------------------------------------------------------------------------------


def test_win_probability_is_lichess_formula_and_mates_are_certain() -> None:
    assert win_probability(chess.engine.Cp(0)) == 0.5
    assert win_probability(chess.engine.Cp(200)) == pytest.approx(0.5 + 0.5 * (2 / (1 + math.exp(-0.736416)) - 1))
    assert win_probability(chess.engine.Cp(-200)) == pytest.approx(1 - win_probability(chess.engine.Cp(200)))
    assert win_probability(chess.engine.Mate(3)) == 1.0 and win_probability(chess.engine.Mate(-2)) == 0.0
    # TCEC's archive holds evaluations of thousands of pawns (wv=9999): certain, and no overflow.
    assert win_probability(chess.engine.Cp(-999_900)) == 0.0 and win_probability(chess.engine.Cp(999_900)) == 1.0


def test_policy_target_is_a_softmax_of_scored_moves() -> None:
    wins = np.array([0.5, 0.6, 0.1, 0.6])
    scored = np.array([True, True, True, False])
    probs = policy_target(wins, scored, 0.1)
    expected = np.exp(np.array([0.5, 0.6, 0.1]) / 0.1)
    np.testing.assert_allclose(probs[:3], expected / expected.sum(), rtol=1e-6)
    assert probs[3] == 0.0
    np.testing.assert_array_equal(policy_target(wins, scored, 0.0), [0, 1, 0, 0])


def test_shorter_mates_get_more_of_the_policy_and_being_mated_sooner_less() -> None:
    # Mate in 1, mate in 3, a winning non-mate, mated in 2, mated in 5, a mate too far away to count.
    mates = np.array([1, 3, 0, -2, -5, MATE_HORIZON + 2])
    wins = np.array([1.0, 1.0, 0.99, 0.0, 0.0, 1.0])
    scored = np.ones(6, dtype=bool)
    bonus = mate_bonus(mates, 2.0)
    np.testing.assert_allclose(bonus, [2.0 * (MATE_HORIZON - 1), 2.0 * (MATE_HORIZON - 3), 0,
                                       -2.0 * (MATE_HORIZON - 2), -2.0 * (MATE_HORIZON - 5), 0])
    probs = policy_target(wins, scored, 0.05, bonus)
    logits = wins / 0.05 + bonus
    np.testing.assert_allclose(probs, np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum(), rtol=1e-5)
    assert probs[0] > probs[1] > probs[5] > probs[2] and probs[4] > probs[3]
    np.testing.assert_array_equal(policy_target(wins, scored, 0.0, bonus), [1, 0, 0, 0, 0, 0])
    # Without a preference every mate is the same win, as before: the first of them is the best.
    np.testing.assert_array_equal(policy_target(wins, scored, 0.0, mate_bonus(mates, 0.0)), [1, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(policy_target(wins, scored, 0.05, mate_bonus(mates, 0.0)),
                               policy_target(wins, scored, 0.05), rtol=1e-6)
    assert policy_target(wins[1:], scored[1:], 0.0, bonus[1:])[0] == 1.0  # mate in 3 beats the farther mate


def test_labels_of_a_mate_prefer_the_shortest_one(tmp_path: Path) -> None:
    stockfish_or_skip()
    # White mates in one (Qh7#... here Ra8#) or more slowly; the label's best move is the mate in one.
    epd = tmp_path / "mate.epd"
    epd.write_text("6k1/5ppp/8/8/8/8/5PPP/R5K1 w - -\n")
    settings = LabelSettings(2000, 1, PretrainConfig(shard_positions=1), (str(epd),))
    label_positions(tmp_path / "l", settings, workers=1)
    shard = _all_samples(tmp_path / "l")
    best = shard.policy_indices[np.argmax(shard.policy_probs)]
    assert best == move_to_index(chess.Move.from_uci("a1a8"), chess.WHITE)
    assert shard.policy_probs.max() > 0.9 and shard.root_values[0] == 1.0


def _moves_that_follow_the_label(directory: Path) -> list[tuple[list[bool], list[bool]]]:
    """For each labelling game: whether each of White's, then Black's moves was its label's best move."""
    samples = _all_samples(directory)
    games: dict[int, tuple[list[bool], list[bool]]] = {}
    for row in range(len(samples)):
        game = samples.games[int(samples.game[row])]
        ply = int(samples.ply[row])
        if ply >= len(game["moves"]):
            continue
        board = chess.Board(game["start_fen"])
        for uci in game["moves"][:ply]:
            board.push_uci(uci)
        lo, hi = samples.policy_offsets[row], samples.policy_offsets[row + 1]
        best = samples.policy_indices[lo:hi][np.argmax(samples.policy_probs[lo:hi])]
        played = move_to_index(chess.Move.from_uci(game["moves"][ply]), board.turn)
        games.setdefault(int(samples.game[row]), ([], []))[ply % 2].append(bool(played == best))
    return list(games.values())


def test_labels_without_a_value_train_the_policy_alone(tmp_path: Path) -> None:
    stockfish_or_skip()
    _label(tmp_path / "valued", workers=1, positions=16)
    _label(tmp_path / "policy", workers=1, positions=16, label_value=False)
    valued, policy_only = concatenate(_chunks(tmp_path / "valued").values()), _chunks(tmp_path / "policy")
    for shard in policy_only.values():
        assert shard.meta["value_target"] == "none" and shard.meta["labels"]["label_value"] is False
        assert np.isnan(value_targets(shard)).all()
    # The same labels otherwise: Stockfish's value stays in root_values (for eval.probe), the policy the same.
    policy_only_all = concatenate(policy_only.values())
    np.testing.assert_array_equal(policy_only_all.root_values, valued.root_values)
    np.testing.assert_array_equal(policy_only_all.policy_probs, valued.policy_probs)
    assert "label_value" not in LabelSettings(40, 16).identity("sf")  # labels made before the choice resume
    # The learner reads them as positions without a value target and trains on them.
    window = ReplayWindow(tmp_path / "policy", window_positions=100, max_sample_reuse=0)
    window.refresh(force=True)
    batch = window.sample(8)
    assert np.isnan(batch.z).all()
    config = old_tiny()  # a window without game targets: the old tiny's learner reads none
    trainer = Trainer(AlphaZeroNet(config.network), config.learner, torch.device("cpu"), precision="float32")
    stats = trainer.step(batch, 0).as_floats()
    assert np.isfinite(stats["total"]) and stats["value"] == 0.0 and stats["policy"] > 0


def test_in_lopsided_games_one_side_moves_at_random(tmp_path: Path) -> None:
    stockfish_or_skip()
    # No random opening, no random moves of the label player, and it plays its best move (temperature 0).
    plain = dict(positions=40, shard_positions=40, game_plies=16, opening_plies=0, random_move_fraction=0.0,
                 temperature=0.0, endgame_fraction=0.0)
    _label(tmp_path / "even", workers=1, random_side_fraction=0.0, **plain)
    for white, black in _moves_that_follow_the_label(tmp_path / "even"):
        assert all(white) and all(black)
    _label(tmp_path / "lopsided", workers=1, random_side_fraction=1.0, **plain)
    games = _moves_that_follow_the_label(tmp_path / "lopsided")
    assert len(games) >= 2
    for white, black in games:  # one side follows its labels, the other does not
        assert all(white) != all(black)


def test_label_settings_without_the_new_options_keep_their_identity() -> None:
    old = LabelSettings(10, 5, PretrainConfig(mate_preference=0.0, random_side_fraction=0.0,
                                              endgame_fraction=0.0)).identity("sf")
    for name in ("mate_preference", "random_side_fraction", "endgame_fraction"):
        assert name not in old  # older runs' labels still resume
    new = LabelSettings(nodes=10, positions=5).identity("sf")
    assert new["mate_preference"] == 2.0 and new["random_side_fraction"] == 0.25 and new["endgame_fraction"] == 0.2


def test_endgame_starts_are_legal_unfinished_won_endings() -> None:
    draws = [endgame_start(np.random.default_rng([7, i])) for i in range(300)]
    assert draws == [endgame_start(np.random.default_rng([7, i])) for i in range(300)]  # a seed, the same
    assert len({fen for fen, _ in draws}) == 300
    attackers_to_move = 0
    for fen, defender in draws:
        board = chess.Board(fen)
        assert board.is_valid() and not board.is_game_over(), fen
        attacker = not defender
        assert board.pieces(chess.QUEEN, attacker) or board.pieces(chess.ROOK, attacker), fen
        defender_men = len(chess.SquareSet(board.occupied_co[defender]))
        assert defender_men == 1 + len(board.pieces(chess.PAWN, defender)) <= 3, fen  # a king, at most two pawns
        assert sorted(m.uci() for m in board.legal_moves) == sorted(Board(fen).legal_moves())
        attackers_to_move += board.turn == attacker
    assert 50 < attackers_to_move < 250  # either side may be to move


def test_endgame_games_start_from_the_endgame_and_the_defender_moves_at_random(tmp_path: Path) -> None:
    stockfish_or_skip()
    plain = dict(positions=40, shard_positions=40, game_plies=16, random_move_fraction=0.0, temperature=0.0,
                 endgame_fraction=1.0)
    _label(tmp_path / "lopsided", workers=1, random_side_fraction=1.0, **plain)
    samples = _all_samples(tmp_path / "lopsided")
    starts = {game["start_fen"] for game in samples.games}
    assert len(starts) >= 2 and chess.STARTING_FEN not in starts
    followed = {True: [], False: []}  # the attacker's moves, the defender's: each its label's best move?
    for row in range(len(samples)):
        game = samples.games[int(samples.game[row])]
        start = chess.Board(game["start_fen"])
        attacker = bool(start.pieces(chess.QUEEN, chess.WHITE) or start.pieces(chess.ROOK, chess.WHITE))
        board = start.copy()
        for uci in game["moves"][: int(samples.ply[row])]:
            board.push_uci(uci)
        np.testing.assert_array_equal(samples.planes[row], reference_compact(board)[0])  # the encoder's planes
        if int(samples.ply[row]) < len(game["moves"]):
            lo, hi = samples.policy_offsets[row], samples.policy_offsets[row + 1]
            best = samples.policy_indices[lo:hi][np.argmax(samples.policy_probs[lo:hi])]
            played = move_to_index(chess.Move.from_uci(game["moves"][int(samples.ply[row])]), board.turn)
            followed[board.turn == attacker].append(bool(played == best))
    assert followed[True] and all(followed[True])  # the attacker plays its labels' best moves
    assert followed[False] and not all(followed[False])  # the defender moves at random


def _label(directory: Path, workers: int = 2, nodes: int = 40, positions: int = 30, **pretrain) -> None:
    settings = LabelSettings(nodes, positions, PretrainConfig(**{"shard_positions": 8, **pretrain}))
    label_positions(directory, settings, workers=workers)


def _chunks(directory: Path) -> dict[int, Shard]:
    return {read_shard_meta(path)["chunk"]: read_shard(path) for path in list_shards(directory)}


def test_labels_are_deterministic_for_a_seed(tmp_path: Path) -> None:
    stockfish_or_skip()
    _label(tmp_path / "a")
    _label(tmp_path / "b", workers=1)
    _label(tmp_path / "c", seed=1)
    a, b, c = _chunks(tmp_path / "a"), _chunks(tmp_path / "b"), _chunks(tmp_path / "c")
    assert sorted(a) == sorted(b) == [0, 1, 2, 3] and [len(a[i]) for i in range(4)] == [8, 8, 8, 6]
    for chunk in a:  # two workers or one, the same positions and the same labels
        for name in ("planes", "scalars", "policy_offsets", "policy_indices", "policy_probs", "root_values"):
            np.testing.assert_array_equal(getattr(a[chunk], name), getattr(b[chunk], name))
        assert a[chunk].games == b[chunk].games
    assert any(not np.array_equal(a[i].planes, c[i].planes) for i in a)  # another seed, other games
    shard = a[0]
    assert shard.meta["value_target"] == "root_values"
    np.testing.assert_array_equal(value_targets(shard), shard.root_values)
    window = ReplayWindow(tmp_path / "a", window_positions=100, max_sample_reuse=0)
    window.refresh(force=True)
    values = set(np.concatenate([a[i].root_values for i in a]).tolist())
    z = window.sample(64).z.tolist()
    assert set(z) <= values and any(v not in (-1.0, 0.0, 1.0) for v in z)  # the learner's value target
    sums = np.add.reduceat(shard.policy_probs, shard.policy_offsets[:-1])
    np.testing.assert_allclose(sums, 1.0, rtol=1e-5)
    assert np.all(np.abs(shard.root_values) <= 1.0)
    # Each move's win probability (the probe's regret): the best of them is the value, and the move with
    # the largest policy share has it.
    assert shard.policy_wins is not None
    starts = shard.policy_offsets[:-1]
    np.testing.assert_allclose(2 * np.fmax.reduceat(shard.policy_wins, starts) - 1, shard.root_values, atol=1e-6)
    for first, last in zip(starts, shard.policy_offsets[1:], strict=True):
        favourite = first + int(np.argmax(shard.policy_probs[first:last]))
        assert shard.policy_wins[favourite] == np.nanmax(shard.policy_wins[first:last])


def test_labelled_positions_are_the_encoder_s_and_stockfish_s(tmp_path: Path) -> None:
    stockfish_or_skip()
    _label(tmp_path / "l", positions=8, temperature=0.0)
    shard = _all_samples(tmp_path / "l")
    with chess.engine.SimpleEngine.popen_uci(stockfish_or_skip()) as engine:
        engine.configure({"Threads": 1, "Hash": 16})
        for row in range(len(shard)):
            game = shard.games[int(shard.game[row])]
            board = chess.Board(game["start_fen"])
            for uci in game["moves"][: int(shard.ply[row])]:
                board.push_uci(uci)
            planes, _ = reference_compact(board)
            np.testing.assert_array_equal(shard.planes[row], planes)
            info = engine.analyse(board, chess.engine.Limit(nodes=40), multipv=board.legal_moves.count(),
                                  game=object())
            lo, hi = shard.policy_offsets[row], shard.policy_offsets[row + 1]
            best = shard.policy_indices[lo:hi][np.argmax(shard.policy_probs[lo:hi])]
            # Stockfish's first line is not always its best score at so few nodes (a mate against it first,
            # a lost but unmated move second): the label's best move is the one it scores highest.
            wins = {move_to_index(line["pv"][0], board.turn): win_probability(line["score"].relative) for line in info}
            assert wins[best] == max(wins.values())
            assert shard.root_values[row] == pytest.approx(2 * max(wins.values()) - 1)
            # Every scored move's win probability is python-chess's reading of Stockfish's lines (the labeller
            # reads them itself), and only those are scored (NaN: no line; at 40 nodes Stockfish has few).
            labelled = {int(index): win for index, win in zip(shard.policy_indices[lo:hi], shard.policy_wins[lo:hi],
                                                              strict=True) if not math.isnan(win)}
            assert labelled == pytest.approx(wins, abs=1e-6)


def _fake_engine(tmp_path: Path, body: str) -> str:
    """An executable that speaks as much UCI as ``body`` (bash) says."""
    path = tmp_path / "fake-engine"
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_a_stockfish_that_dies_or_never_answers_is_a_message(tmp_path: Path, monkeypatch) -> None:
    import learner.labeller

    settings = LabelSettings(40, 4, PretrainConfig(shard_positions=4))
    # Answers the handshake, then exits at the first search.
    dies = _fake_engine(tmp_path, 'while read line; do case "$line" in uci) echo "id name Fake"; echo uciok;; '
                                  'isready) echo readyok;; go*) exit 3;; esac; done')
    with pytest.raises(UserError, match=r"Stockfish failed on position fen .* it exited"):
        label_positions(tmp_path / "dies", settings, workers=1, stockfish=dies)
    monkeypatch.setattr(learner.labeller, "START_SECONDS", 0.2)
    silent = _fake_engine(tmp_path, "cat > /dev/null")
    with pytest.raises(UserError, match=r"did not start: no 'uciok' in 0.2 s"):
        label_positions(tmp_path / "silent", settings, workers=1, stockfish=silent)


def test_labels_from_pgn_and_epd_files(tmp_path: Path) -> None:
    stockfish_or_skip()
    settings = LabelSettings(40, 100, PretrainConfig(shard_positions=16), (str(POSITIONS),))
    report = label_positions(tmp_path / "epd", settings, workers=1)
    assert report.labelled == 4 and report.exhausted
    assert report.skipped == Counter({"unreadable EPD line": 1, "EPD position without a move to label": 1})
    # The last line is a whole FEN (its halfmove clock counts towards the fifty-move rule): as python-chess reads it.
    last = concatenate(_chunks(tmp_path / "epd").values())
    fen = POSITIONS.read_text().splitlines()[-1]
    planes, scalars = reference_compact(chess.Board(fen))
    np.testing.assert_array_equal(last.planes[-1], planes)
    np.testing.assert_array_equal(last.scalars[-1], scalars)
    settings = LabelSettings(40, 24, PretrainConfig(shard_positions=16), (str(GAMES),))
    assert label_positions(tmp_path / "pgn", settings, workers=2).labelled == 24
    chunks = _chunks(tmp_path / "pgn")
    labelled = concatenate(chunks[i] for i in sorted(chunks))
    convert_pgn(tmp_path / "games", [str(GAMES)], progress=False)
    games = _all_samples(tmp_path / "games")
    # The first 24 positions of the file: game 1's 7, game 6's first 17, in order (game 3, from a set-up
    # position, is skipped).
    np.testing.assert_array_equal(labelled.planes, games.planes[:24])
    assert game_ids(labelled.games, "any.npz")[:2] == ["pretrain_games.pgn:1", "pretrain_games.pgn:6"]


PUZZLE_YARDSTICK = ROOT / "eval" / "data" / "lichess_puzzles_sample.csv"


def _labelled_boards(directory: Path) -> list[chess.Board]:
    """The board of each labelled position in ``directory``'s shards, as python-chess plays its game's moves."""
    labelled = _all_samples(directory)
    boards = []
    for row in range(len(labelled)):
        game = labelled.games[int(labelled.game[row])]
        board = chess.Board(game["start_fen"])
        for uci in game["moves"][: int(labelled.ply[row])]:
            board.push_uci(uci)
        np.testing.assert_array_equal(labelled.planes[row], reference_compact(board)[0])
        boards.append(board)
    return boards


def test_labels_from_puzzles_leave_the_held_out_ones_out(tmp_path: Path, capsys) -> None:
    stockfish_or_skip()
    header, *rows = PUZZLE_YARDSTICK.read_text().splitlines()[:6]
    held_out = tmp_path / "held_out.csv"
    held_out.write_text("\n".join([header, rows[0], rows[1]]) + "\n")
    renamed = "zzzzz" + rows[1][5:]  # the second held-out puzzle under another id: its positions give it away
    bad = rows[3].replace(rows[3].split(",")[2].split()[1], "a1a1")  # its first solving move made illegal
    puzzles = tmp_path / "puzzles.csv"
    puzzles.write_text("\n".join([header, rows[0], renamed, rows[2], bad, rows[4]]) + "\n")
    settings = LabelSettings.of(PretrainConfig(shard_positions=16), nodes=40, positions=100, files=[puzzles],
                                held_out=[held_out])
    report = label_positions(tmp_path / "labels", settings, workers=1)
    assert report.skipped == Counter({"held-out puzzle": 2, "unreadable puzzle": 1})
    assert report.exhausted
    # Every position of the two puzzles left (before each move: the opponent's, then the solver's and the
    # opponent's replies in turn), in order, as python-chess plays their moves.
    expected = []
    for row in (rows[2], rows[4]):
        fields = row.split(",")
        board = chess.Board(fields[1])
        for uci in fields[2].split():
            expected.append(board.fen())
            board.push_uci(uci)
    boards = _labelled_boards(tmp_path / "labels")
    assert report.labelled == len(boards) == len(expected)
    assert [board.fen() for board in boards] == expected
    # A CSV that is not a puzzle file is reported and left, not a traceback.
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    settings = LabelSettings.of(PretrainConfig(shard_positions=16), nodes=40, positions=10, files=[other])
    report = label_positions(tmp_path / "other", settings, workers=1)
    assert report.labelled == 0 and report.skipped == Counter({"damaged file": 1})
    assert "other.csv: the header lacks FEN, Moves; a Lichess puzzle CSV starts with" in capsys.readouterr().out


def test_puzzle_alternatives_label_what_the_solver_s_other_moves_lead_to(tmp_path: Path) -> None:
    stockfish_or_skip()
    header, *rows = PUZZLE_YARDSTICK.read_text().splitlines()[:4]
    puzzles = tmp_path / "puzzles.csv"
    puzzles.write_text("\n".join([header, *rows]) + "\n")
    config = PretrainConfig(shard_positions=16, puzzle_alternatives=2)
    settings = LabelSettings.of(config, nodes=40, positions=200, files=[puzzles], held_out=[])
    report = label_positions(tmp_path / "labels", settings, workers=1)
    assert report.exhausted and not report.skipped
    boards = _labelled_boards(tmp_path / "labels")
    assert report.labelled == len(boards)
    # Each puzzle: its own positions (before each move), then for each position where the solver moves (the
    # second, the fourth, ...) the positions after two of its other legal moves, none of them ending the game.
    seen = 0
    for row in rows:
        fields = row.split(",")
        board, solution = chess.Board(fields[1]), fields[2].split()
        own = []
        for uci in solution:
            own.append(board.copy())
            board.push_uci(uci)
        assert [b.fen() for b in boards[seen:seen + len(own)]] == [b.fen() for b in own]
        seen += len(own)
        for ply in range(1, len(solution), 2):
            for child in boards[seen:seen + 2]:
                parent, last = child.copy(), child.peek()
                parent.pop()
                assert parent.fen() == own[ply].fen() and last.uci() != solution[ply]
                assert any(child.legal_moves)  # a position with a move to label
            seen += 2
    assert seen == len(boards)
    # The same file gives the same moves again; another count, a prefix of the same shuffle.
    items = list(_file_positions([str(puzzles)], Counter(), frozenset(), 2))
    assert items == list(_file_positions([str(puzzles)], Counter(), frozenset(), 2))
    fewer = [item for item in _file_positions([str(puzzles)], Counter(), frozenset(), 1) if not item[3]]
    assert all(item in items for item in fewer) and len(fewer) == sum(1 for item in items if not item[3]) // 2
    # The option is part of the labels' identity only where it applies: puzzle files, more than none.
    assert settings.identity("sf")["puzzle_alternatives"] == 2
    assert "puzzle_alternatives" not in LabelSettings.of(PretrainConfig(), nodes=40, positions=200,
                                                         files=[puzzles]).identity("sf")
    assert "puzzle_alternatives" not in LabelSettings.of(config, nodes=40, positions=200).identity("sf")


def test_pretrain_holds_the_puzzle_yardstick_out_by_default() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["pretrain", "--stockfish", "10", "--positions", "5", "--positions-from", "p.csv"])
    assert [Path(path).resolve() for path in args.held_out] == [PUZZLE_YARDSTICK.resolve()]
    assert parser.parse_args(["pretrain", "--held-out"]).held_out == []
    keys = puzzle_keys([PUZZLE_YARDSTICK])
    assert sum(key.startswith("id ") for key in keys) == 1027


def test_other_label_settings_in_the_run_are_refused(tmp_path: Path) -> None:
    stockfish_or_skip()
    _label(tmp_path / "l", positions=8)
    with pytest.raises(UserError, match="other settings.*nodes"):
        _label(tmp_path / "l", positions=8, nodes=41)
    with pytest.raises(UserError, match="another --positions"):
        _label(tmp_path / "l", positions=4)


@pytest.mark.slow
def test_a_killed_labeller_loses_no_written_shard_and_a_restart_completes(tmp_path: Path) -> None:
    stockfish_or_skip()
    run = tmp_path / "run"
    chunks, size = 40, 8
    command = ["pretrain", "--run", str(run), "--stockfish", "60",
               "--positions", str(chunks * size), "--set", f"pretrain.shard_positions={size}", "--workers", "1",
               "--data-only", "--quiet"]
    kill_at_first_shard(command, run / "pretrain", bound_s=120)
    before = {path.name: path.read_bytes() for path in list_shards(run / "pretrain")}
    assert 1 <= len(before) < chunks  # killed after the first shard, with most chunks still to label
    assert cli.main(command) == 0
    after = list_shards(run / "pretrain")
    assert all(before[name] == (run / "pretrain" / name).read_bytes() for name in before)  # kept as written
    metas = [read_shard_meta(path) for path in after]
    assert sorted(meta["chunk"] for meta in metas) == list(range(chunks))  # each chunk once: no duplicates
    assert sum(len(read_shard(path)) for path in after) == chunks * size
    window = ReplayWindow(run / "pretrain", window_positions=10_000, max_sample_reuse=0)
    window.refresh(force=True)
    assert len(window) == chunks * size and window.corrupt_shards == 0


def test_a_missing_stockfish_is_a_message(tmp_path: Path, monkeypatch, capsys) -> None:
    import alphazero.chess.stockfish

    monkeypatch.setattr(alphazero.chess.stockfish, "find_stockfish", lambda: None)
    assert cli.main(["pretrain", "--run", str(tmp_path / "run"), "--stockfish", "10", "--positions", "5",
                     "--quiet"]) == 2
    assert "Stockfish was not found" in capsys.readouterr().err


def test_pretrain_options_are_checked(tmp_path: Path, capsys) -> None:
    run = str(tmp_path / "run")
    assert cli.main(["pretrain", "--run", run, "--stockfish", "10"]) == 2
    assert "go together" in capsys.readouterr().err
    assert cli.main(["pretrain", "--run", run, "--quiet"]) == 2
    assert "no positions to train on" in capsys.readouterr().err



# --- pretraining from given weights (--init) -----------------------------------------------------------------

INIT_NET = ["network.blocks=1", "network.filters=16", "network.policy_filters=16", "network.value_filters=2",
            "network.value_hidden=16"]
HEAD_ONLY = ["--set", "network.action_value_head=logit", "--set", "network.action_value_filters=8",
             "--set", "learner.trainable=action_value_head", "--set", "learner.freeze_batch_norm=true",
             "--set", "learner.batch_size=16", "--set", "learner.learning_rates=[0.05]", "--set",
             "learner.lr_boundaries=[]", "--set", "learner.scale_lr=false", "--set", "learner.validation_share=0",
             "--set", "learner.cpu_precision=float32", "--set", "learner.device=cpu"]


def _write_labelled(folder: Path) -> None:
    """Stockfish-style shards in ``folder``: a win probability after every move (policy_wins)."""
    import dataclasses

    from alphazero.store.shards import shard_name, write_shard
    from tests.helpers import make_shard

    folder.mkdir(parents=True, exist_ok=True)
    shard = make_shard(range(0, 64))
    wins = np.random.default_rng(1).random(len(shard.policy_indices)).astype(np.float32)
    write_shard(folder / shard_name("labels"), dataclasses.replace(shard, policy_wins=wins, meta={"kind": "stockfish"}))


def _init_file(path: Path) -> dict[str, torch.Tensor]:
    """Saves a trained-looking head-less network as a model file; returns its weights."""
    from alphazero.config import apply_overrides
    from alphazero.store.checkpoint import save_model

    torch.manual_seed(11)
    model = AlphaZeroNet(apply_overrides(get_preset("tiny"), INIT_NET).network)
    save_model(path, model, step=7, summary="test weights")
    return {name: value.clone() for name, value in model.state_dict().items()}


def test_pretrain_init_trains_a_fresh_action_value_head_alone_on_the_given_weights(tmp_path: Path, capsys) -> None:
    """`pretrain --init FILE --set network.action_value_head=logit --set learner.trainable=action_value_head`
    on a run whose pretrain/ data --data-only wrote (another network, no checkpoint): the run takes the
    init's network with a fresh head, step 0 holds the init's weights, and the steps move the head alone."""
    from alphazero.store.checkpoint import checkpoint_name, load_checkpoint

    start = _init_file(tmp_path / "init.pt")
    run, _ = RunDir.create_or_open(tmp_path / "run", get_preset("tiny"))  # as --data-only leaves it: 1x32
    _write_labelled(run.pretrain)
    args = ["pretrain", "--run", str(run.root), "--init", str(tmp_path / "init.pt"), *HEAD_ONLY, "--steps", "3",
            "--quiet"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "takes the --init network" in out and "starting from" in out and "test weights" in out
    network = run.read_config().network
    assert (network.blocks, network.filters, network.action_value_head) == (1, 16, "logit")
    first = load_checkpoint(run.checkpoints / checkpoint_name(0))["model"]
    last = load_checkpoint(run.checkpoints / checkpoint_name(3))["model"]
    assert set(start) < set(first)  # the init's weights, and a head beside them
    for name, value in start.items():  # the tower, the policy and value heads, their statistics: the init's
        assert torch.equal(first[name], value) and torch.equal(last[name], value), name
    moved = {name for name in first if name.startswith("action_value") and not torch.equal(first[name], last[name])}
    assert {"action_value_conv.weight", "action_value.out.weight"} <= moved

    assert cli.main(args) == 2  # now it has checkpoints: it resumes from its own, without --init
    assert "already has checkpoints" in capsys.readouterr().err
    assert cli.main(["pretrain", "--run", str(tmp_path / "other"), "--init", str(tmp_path / "init.pt"),
                     "--data-only", "--pgn", str(GAMES)]) == 2
    assert "--init FILE_OR_RUN starts the training" in capsys.readouterr().err
    headless = [a for a in args if a not in ("network.action_value_head=logit", "network.action_value_filters=8")]
    headless = [a for i, a in enumerate(headless) if not (a == "--set" and headless[i + 1] == "--set")]
    fresh = tmp_path / "fresh"
    _write_labelled(fresh / "pretrain")
    assert cli.main([*headless[:2], str(fresh), *headless[3:]]) == 2  # the head alone, but no head
    err = capsys.readouterr().err
    assert "has none (network.action_value_head = 'none')" in err and len(err.strip().splitlines()) == 1
