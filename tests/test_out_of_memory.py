"""Out of memory on the command line (issue 69): one line saying what ran out (the GPU the error names, or the
machine's memory) and which settings of the command to lower, and a non-zero exit, instead of a traceback
(alphazero.out_of_memory, alphazero.app.cli.main).

Each command runs in process with the function it calls replaced by one that raises, as a real allocation would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from alphazero.app import cli
from alphazero.errors import UserError
from alphazero.out_of_memory import OUT_OF_MEMORY_STATUS, is_out_of_memory, out_of_memory_in, what_ran_out

GPU_OOM = "CUDA out of memory. Tried to allocate 512.00 MiB. GPU 1 has a total capacity of 15.77 GiB of which " \
          "3.06 MiB is free. Including non-PyTorch memory, this process has 15.76 GiB memory in use."
CPU_OOM = "DefaultCPUAllocator: not enough memory: you tried to allocate 1099511627776 bytes."


def _raising(error: BaseException) -> Any:
    def fail(*args: Any, **kwargs: Any) -> None:
        raise error
    return fail


COMMANDS = [
    # (the command line, the function it calls, what to lower on a GPU, what to lower on the machine)
    (["train", "--run", "{run}"], "alphazero.app.train.run",
     "learner.batch_size or selfplay.gpu_games_per_actor", "learner.batch_size, learner.window_positions, "
     "selfplay.games_per_actor or selfplay.actors"),
    (["learn", "--run", "{run}"], "alphazero.store.rundir.open_run_from_args", "learner.batch_size (--set",
     "learner.batch_size or learner.window_positions"),
    (["selfplay", "--run", "{run}"], "selfplay.cli.run", "selfplay.gpu_games_per_actor",
     "selfplay.games_per_actor or selfplay.actors"),
    (["pretrain", "--run", "{run}", "--pgn", "games.pgn"], "learner.cli.run_pretrain", "learner.batch_size",
     "learner.batch_size"),
    (["uci", "--weights", "builtin"], "eval.cli.run_uci_command", "the engine's LeavesPerBatch option",
     "the engine's Hash option (0: half the machine's memory) or Nodes"),
    (["match", "vs", "random"], "eval.cli.run_match", "--concurrency", "--simulations (a player's search:N)"),
    (["puzzles", "puzzles.csv"], "eval.cli.run_puzzles", "--concurrency", "--nodes or --concurrency"),
]


@pytest.mark.parametrize(("argv", "target", "on_gpu", "on_machine"), COMMANDS, ids=[c[0][0] for c in COMMANDS])
@pytest.mark.parametrize("kind", ["cuda", "cpu", "python"])
def test_out_of_memory_is_one_line_naming_what_ran_out_and_what_to_lower(
        argv: list[str], target: str, on_gpu: str, on_machine: str, kind: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    error = {"cuda": torch.OutOfMemoryError(GPU_OOM), "cpu": torch.OutOfMemoryError(CPU_OOM),
             "python": MemoryError()}[kind]
    monkeypatch.setattr(target, _raising(error))
    status = cli.main([part.format(run=tmp_path / "run") for part in argv])
    err = capsys.readouterr().err
    assert status == OUT_OF_MEMORY_STATUS != 0
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"alphazero {argv[0]}: error: out of memory: ")
    if kind == "cuda":
        assert "out of memory: GPU 1" in err and "ran out (allocating 512.00 MiB); lower " in err and on_gpu in err
    else:
        allocation = " (allocating 1099511627776 bytes)" if kind == "cpu" else ""
        assert f"out of memory: the machine's memory ran out{allocation}; lower {on_machine}" in err, err


def test_an_out_of_memory_wrapped_in_a_one_line_error_is_still_said_as_out_of_memory(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # As a self-play actor's failure reaches the driver: a UserError raised while handling the actor's error.
    def actor_failed(*args: Any, **kwargs: Any) -> None:
        try:
            raise torch.OutOfMemoryError(GPU_OOM)
        except torch.OutOfMemoryError as error:
            raise UserError(f"a self-play actor failed with {type(error).__name__}") from None

    monkeypatch.setattr("selfplay.cli.run", actor_failed)
    assert cli.main(["selfplay", "--run", str(tmp_path / "run")]) == OUT_OF_MEMORY_STATUS
    err = capsys.readouterr().err
    assert "out of memory: GPU 1" in err and "selfplay.gpu_games_per_actor" in err and "actor failed" not in err


def test_a_remote_tasks_out_of_memory_is_recognised_without_naming_the_drivers_gpu() -> None:
    ray_exceptions = pytest.importorskip("ray.exceptions")
    remote = ray_exceptions.RayTaskError("play", "Traceback ...\n" + GPU_OOM, torch.OutOfMemoryError(GPU_OOM))
    error = remote.as_instanceof_cause()
    assert error is not None and is_out_of_memory(error)
    assert what_ran_out(error) == "GPU 1"  # numbered as the actor saw it: no name of this process's GPU 1
    assert out_of_memory_in(error) is error


def test_other_errors_are_not_taken_for_out_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not is_out_of_memory(RuntimeError("CUDA error: an illegal memory access was encountered"))
    monkeypatch.setattr("eval.cli.run_match", _raising(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):  # a bug keeps its traceback
        cli.main(["match", "vs", "random"])


def test_a_user_error_is_still_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("eval.cli.run_match", _raising(UserError("no such player 'randon'")))
    assert cli.main(["match", "vs", "randon"]) == 2
    assert capsys.readouterr().err == "alphazero match: error: no such player 'randon'\n"
