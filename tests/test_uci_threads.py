"""The engine's threads beside other work (eval.uci_threads) and the precision kept per machine
(alphazero.nn.kept_precision)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from alphazero.nn import precision as precision_module
from alphazero.nn.kept_precision import KEPT_TIMING_ROUNDS, KeptPrecisions
from alphazero.nn.precision import choose_precision
from alphazero.user_cache import CACHE_ENV, user_cache_dir, write_atomic
from eval import uci_threads
from eval.uci_threads import BusyMeter, ThreadsFollowingLoad, default_threads, waits_passively

# --- Threads 0 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("cores", "busy", "spinning"), [(2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 1.0, 1),
                                                         (2, 2.0, 1), (2, 7.5, 1), (16, 2.6, 13), (1, 0.0, 1)])
def test_threads_0_takes_every_core_waiting_passively_and_the_free_ones_spinning(cores: int, busy: float,
                                                                                 spinning: int) -> None:
    assert default_threads(cores, busy, passive=True) == cores
    assert default_threads(cores, busy, passive=False) == spinning


@pytest.mark.parametrize(("cores", "busy"), [(0, 0.0), (2, -0.5), (2, float("nan"))])
def test_threads_0_refuses_a_bad_machine_reading(cores: int, busy: float) -> None:
    with pytest.raises(ValueError, match="must be at least"):
        default_threads(cores, busy, passive=False)


def test_the_busy_meter_counts_other_work_and_leaves_the_engines_own_out(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([100.0, 103.0])  # the machine's non-idle seconds at start() and at busy()
    walls = iter([10.0, 12.0])
    own = iter([5.0, 6.0])  # the engine itself ran one CPU second of those three
    monkeypatch.setattr(uci_threads.time, "monotonic", lambda: next(walls))
    monkeypatch.setattr(uci_threads.time, "process_time", lambda: next(own))
    meter = BusyMeter(read=lambda: next(readings))
    meter.start()
    assert meter.busy() == pytest.approx(1.0)  # (3 - 1) seconds over 2: one core busy elsewhere


def test_without_proc_stat_the_meter_reads_the_load_average() -> None:
    meter = BusyMeter(read=lambda: None, load_average=lambda: 2.5)
    meter.start()
    assert meter.busy(own_threads=1) == pytest.approx(1.5)
    assert BusyMeter(read=lambda: None, load_average=lambda: 0.5).busy(own_threads=2) == 0.0


def test_proc_stat_leaves_niced_and_idle_time_out(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 5000 50 9000 7 3 2 1 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    ticks = uci_threads.os.sysconf("SC_CLK_TCK")
    assert uci_threads._read_proc_stat(stat) == pytest.approx((100 + 50 + 3 + 2 + 1) / ticks)
    assert uci_threads._read_proc_stat(tmp_path / "missing") is None


def test_the_threads_wait_passively_only_where_the_user_says() -> None:
    assert not waits_passively({})  # the engine sets no policy: libgomp's short spin
    assert waits_passively({"OMP_WAIT_POLICY": "passive"}) and waits_passively({"GOMP_SPINCOUNT": "0"})
    assert not waits_passively({"OMP_WAIT_POLICY": "ACTIVE"}) and not waits_passively({"GOMP_SPINCOUNT": "1000"})


class _GivenLoad(BusyMeter):
    """A meter whose readings of the cores busy elsewhere the test gives, one per look."""

    def __init__(self, readings: list[float]) -> None:
        super().__init__(read=lambda: None)
        self.readings = iter(readings)

    def busy(self, own_threads: int = 0) -> float:
        return next(self.readings)


def test_threads_0_follows_the_load_through_a_search() -> None:
    now = [0.0]
    set_to: list[int] = []
    follower = ThreadsFollowingLoad(2, 2, meter=_GivenLoad([1.0, 0.9, 0.2]), set_threads=set_to.append,
                                    look_s=0.25, clock=lambda: now[0])
    assert not follower.look() and set_to == []  # no look due yet
    now[0] = 0.3  # a busy process came: one thread, which has no partner to spin for
    assert follower.look() and follower.threads == 1 and set_to == [1] and follower.busy == pytest.approx(1.0)
    now[0] = 0.4
    assert not follower.look()  # the next look is a quarter of a second after the last
    now[0] = 0.6
    assert not follower.look() and set_to == [1]  # still busy: nothing to change
    now[0] = 0.9  # it left: both cores again
    assert follower.look() and follower.threads == 2 and set_to == [1, 2]


def _searched(weights: Path, *options: str) -> tuple[str, int]:
    """Runs `go nodes 48` in an in-process engine with ``options``; returns its output and the threads its
    network thread kept."""
    from eval.uci import UciEngine

    out = io.StringIO()
    engine = UciEngine(None, weights, "cpu", stdin=io.StringIO(""), stdout=out)
    try:
        for option in options:
            engine.handle(f"setoption name {option}")
        engine.handle("position startpos")
        engine.handle("go nodes 48")
        engine.wait()
        return out.getvalue(), engine.on_network_thread(torch.get_num_threads)
    finally:
        engine.handle("quit")


def test_the_engine_drops_a_thread_when_other_work_takes_a_core(weights: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import eval.uci as uci_module

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setattr(uci_module, "machine_cores", lambda: 2)
    monkeypatch.setattr(uci_module, "ThreadsFollowingLoad",
                        lambda cores, threads: ThreadsFollowingLoad(cores, threads, meter=_GivenLoad([1.0] * 1000),
                                                                    look_s=0.0))
    out, threads = _searched(weights, "Threads value 0")
    assert "info string threads: 1 (Threads 0: 2 cores less 1.0 busy elsewhere)" in out
    assert threads == 1 and "bestmove " in out
    out, threads = _searched(weights, "Threads value 2")  # a count the user gives stays as given
    assert "info string threads:" not in out and threads == 2


# --- the precision kept per machine ------------------------------------------------------------


def test_the_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert user_cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache_dir() == tmp_path / "xdg" / "alphazero"


def test_a_cache_file_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "file.json"
    write_atomic(path, "one\n")
    write_atomic(path, "two\n")
    assert path.read_text() == "two\n"
    assert [p.name for p in path.parent.iterdir()] == ["file.json"]  # no temporary left behind


def _timer(calls: list[bool], speedup: float = 2.0) -> precision_module.Timer:
    def timer(bf16: bool) -> float:
        calls.append(bf16)
        return 1.0 / speedup if bf16 else 1.0
    return timer


def test_an_auto_choice_is_measured_once_per_machine_and_kept(tmp_path: Path) -> None:
    keep = KeptPrecisions(tmp_path / "precision.json", today=lambda: "2026-01-02")
    calls: list[bool] = []
    cpu = torch.device("cpu")
    first = choose_precision("auto", cpu, key=("arch", "forward", 32), timer=_timer(calls), probe=lambda: "AMX",
                             keep=keep)
    assert first.name == "bf16" and first.speedup == pytest.approx(2.0)
    assert len(calls) == 2 * KEPT_TIMING_ROUNDS  # enough rounds, alternating
    assert "measured now" in first.reason and str(keep.path) in first.reason
    # Another process (a second engine of the match) reads it, under whatever load, without timing.
    again = choose_precision("auto", cpu, key=("arch", "forward", 32), timer=_timer(calls, speedup=1.0),
                             probe=lambda: "AMX", keep=KeptPrecisions(keep.path))
    assert again.name == "bf16" and len(calls) == 2 * KEPT_TIMING_ROUNDS
    assert "measured 2026-01-02, kept in" in again.reason
    # Another network shape is measured on its own; a forced setting and a processor without bf16 never time.
    other = choose_precision("auto", cpu, key=("other", "forward", 32), timer=_timer(calls, speedup=1.0),
                             probe=lambda: "AMX", keep=keep)
    assert other.name == "float32"
    assert len(json.loads(keep.path.read_text())) == 2
    assert choose_precision("float32", cpu, key="x", timer=_timer(calls), probe=lambda: "AMX", keep=keep).name == \
        "float32"
    assert choose_precision("auto", cpu, key="y", timer=_timer(calls), probe=lambda: None, keep=keep).name == \
        "float32"
    assert len(calls) == 4 * KEPT_TIMING_ROUNDS


def test_a_broken_cache_is_measured_again_and_an_unwritable_one_said(tmp_path: Path) -> None:
    path = tmp_path / "precision.json"
    path.write_text("{not json")
    keep = KeptPrecisions(path)
    assert keep.get("k") is None
    choice = choose_precision("auto", torch.device("cpu"), key="k", timer=_timer([]), probe=lambda: "AMX", keep=keep)
    assert choice.bf16 and keep.get("k") is not None
    blocked = tmp_path / "a file"
    blocked.write_text("")
    stuck = KeptPrecisions(blocked / "precision.json")  # its folder is a file: it cannot be written
    choice = choose_precision("auto", torch.device("cpu"), key="k", timer=_timer([]), probe=lambda: "AMX", keep=stuck)
    assert choice.bf16 and "cannot keep it in" in choice.reason


def test_the_command_line_parses_without_torch() -> None:
    """A module the parser imports that pulls torch in (the comparison's summary once did, through self-play)
    costs every command, `--help` included, seconds of torch's import, and would load OpenMP before a command
    could set its environment."""
    program = ("import sys\nfrom alphazero.app.cli import build_parser\nbuild_parser().parse_args(['uci'])\n"
               "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "False", result.stderr
