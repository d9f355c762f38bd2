"""The match runner's files: each finished game appended once, the files the same as a rewrite after each game."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import chess
import chess.pgn
import pytest

import eval.match as match_module
import eval.match_records as records_module
from alphazero.chess.pgn import termination_tags
from eval.agents import RandomAgent
from eval.match import GameRecord, play_match
from eval.openings import Opening, load_openings

FOOLS_MATE = "rnb1kbnr/pppp1ppp/8/4p3/6Pq/5P2/PPPPP2P/RNBQKBNR w KQkq - 1 3"  # White is mated: the game ends at once


def _reference_pgn(records: Sequence[GameRecord]) -> str:
    """The PGN file of these games in round order, built with python-chess alone (as the match's rewrite wrote it)."""
    text = []
    for record in sorted(records, key=lambda r: r.round):
        game = chess.pgn.Game()
        if record.start_fen != chess.STARTING_FEN:
            game.setup(record.start_fen)
        game.headers["Event"] = record.match_id
        game.headers["Date"] = record.started[:10].replace("-", ".")
        game.headers["Round"] = str(record.round)
        game.headers["White"], game.headers["Black"] = record.white, record.black
        game.headers["Result"] = record.result
        game.headers["Opening"] = record.opening
        game.headers.update(termination_tags(record.termination))
        game.headers["PlyCount"] = str(len(record.moves))
        node: chess.pgn.GameNode = game
        for uci in record.moves:
            node = node.add_variation(chess.Move.from_uci(uci))
        text.append(str(game) + "\n\n")
    return "".join(text)


def _reference_jsonl(records: Sequence[GameRecord]) -> str:
    return "".join(json.dumps(r.to_json()) + "\n" for r in sorted(records, key=lambda r: r.round))


class _Watcher(RandomAgent):
    """A random player that, at the start of each game, notes the files as the games before left them."""

    def __init__(self, seed: int, paths: Sequence[Path]) -> None:
        super().__init__(seed)
        self.paths = paths
        self.snapshots: list[list[tuple[int, bytes]]] = []  # per game started: (inode, bytes) of each file

    def new_game(self) -> None:
        if all(path.exists() for path in self.paths):
            self.snapshots.append([(path.stat().st_ino, path.read_bytes()) for path in self.paths])


@pytest.fixture
def bytes_written(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the bytes the match writes to each file name, by every path it writes through."""
    written: dict[str, int] = {}

    def counting(write: Callable[[Path, str], None]) -> Callable[[Path, str], None]:
        def wrapper(path: Path, text: str) -> None:
            written[Path(path).name] = written.get(Path(path).name, 0) + len(text.encode("utf-8"))
            write(path, text)
        return wrapper

    for name in ("append_text", "atomic_write_text"):
        if hasattr(match_module, name):  # (a writer that only rewrites has no append_text)
            monkeypatch.setattr(match_module, name, counting(getattr(match_module, name)))
    return written


def test_each_game_is_appended_once_and_the_files_are_the_rewrites(tmp_path: Path,
                                                                   bytes_written: dict[str, int]) -> None:
    paths = [tmp_path / "m.pgn", tmp_path / "m.jsonl"]
    watcher = _Watcher(1, paths)
    result = play_match(watcher, RandomAgent(2, name="other"), games=6, concurrency=1, ply_limit=40,
                        out_dir=tmp_path, progress=False, match_id="m")
    assert len(result.games) == 6 and result.pgn_path == paths[0] and result.jsonl_path == paths[1]
    final = [path.read_text(encoding="utf-8") for path in paths]
    assert final == [_reference_pgn(result.games), _reference_jsonl(result.games)]
    # After each game the files held exactly the games finished so far (as a rewrite after each game did) ...
    assert len(watcher.snapshots) == 5  # at the start of games 2..6
    for done, snapshot in enumerate(watcher.snapshots, start=1):
        games = result.games[:done]
        assert [data.decode() for _, data in snapshot] == [_reference_pgn(games), _reference_jsonl(games)]
    # ... but through the same file, only ever growing, and each game's bytes were written once.
    inodes = {tuple(inode for inode, _ in snapshot) for snapshot in watcher.snapshots}
    assert inodes == {tuple(path.stat().st_ino for path in paths)}
    assert bytes_written == {path.name: path.stat().st_size for path in paths}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl", "m.pgn"]  # no temporary files left


def test_games_finished_out_of_round_order_end_in_round_order(tmp_path: Path) -> None:
    # Games 3 and 4 start in a mated position and end before games 1 and 2, which play on to the ply limit.
    openings = [load_openings()[0], Opening("mated", [], FOOLS_MATE, start_fen=FOOLS_MATE)]
    result = play_match(RandomAgent(1), RandomAgent(2, name="other"), openings=openings, games=4, concurrency=4,
                        ply_limit=30, out_dir=tmp_path, progress=False, match_id="m")
    assert [g.round for g in result.games] == [1, 2, 3, 4]
    assert [g.termination for g in result.games][2:] == ["checkmate", "checkmate"]
    assert (tmp_path / "m.pgn").read_text(encoding="utf-8") == _reference_pgn(result.games)
    assert (tmp_path / "m.jsonl").read_text(encoding="utf-8") == _reference_jsonl(result.games)


def test_a_rerun_of_a_match_id_replaces_its_files_as_before(tmp_path: Path) -> None:
    # What a killed run of the same id left (evaluation reruns a step's matches under the same ids): a torn line.
    (tmp_path / "m.pgn").write_text('[Event "old"]\n\n1. e4 *\n\n[Event "ol', encoding="utf-8")
    (tmp_path / "m.jsonl").write_text('{"round": 1}\n{"rou', encoding="utf-8")
    result = play_match(RandomAgent(1), RandomAgent(2, name="other"), games=4, concurrency=2, ply_limit=20,
                        out_dir=tmp_path, progress=False, match_id="m")
    assert (tmp_path / "m.pgn").read_text(encoding="utf-8") == _reference_pgn(result.games)
    assert (tmp_path / "m.jsonl").read_text(encoding="utf-8") == _reference_jsonl(result.games)


def test_a_short_write_is_cut_off_so_the_next_record_starts_on_its_own_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"round": 1}\n', encoding="utf-8")
    real_write = os.write

    def half(fd: int, data: bytes) -> int:  # a disk that fills in the middle of the record
        return real_write(fd, data[: len(data) // 2]) if b'"round": 2' in data else real_write(fd, data)

    monkeypatch.setattr(records_module.os, "write", half)
    with pytest.raises(OSError) as raised:
        records_module.append_text(path, '{"round": 2}\n')
    assert raised.value.filename == str(path)
    assert path.read_text(encoding="utf-8") == '{"round": 1}\n'
    monkeypatch.undo()
    records_module.append_text(path, '{"round": 3}\n')
    assert path.read_text(encoding="utf-8").splitlines() == ['{"round": 1}', '{"round": 3}']


def test_an_append_that_fails_moves_every_game_to_a_temporary_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Not only the games after the failure: those already in the folders asked for go to the new one too.
    import errno
    import shutil

    append = match_module.append_text

    def read_only(path: Path, text: str) -> None:  # the disk went read-only after the first game
        if Path(path).is_relative_to(tmp_path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        append(path, text)

    monkeypatch.setattr(match_module, "append_text", read_only)
    result = play_match(RandomAgent(1), RandomAgent(2, name="other"), games=4, concurrency=1, ply_limit=20,
                        out_dir=tmp_path, progress=False, match_id="m")
    assert result.pgn_path is not None and result.jsonl_path is not None
    folder = result.pgn_path.parent
    try:
        assert folder != tmp_path and f"this match's games go to {folder} instead" in capsys.readouterr().err
        assert result.pgn_path.read_text(encoding="utf-8") == _reference_pgn(result.games)
        assert result.jsonl_path.read_text(encoding="utf-8") == _reference_jsonl(result.games)
    finally:
        shutil.rmtree(folder)
