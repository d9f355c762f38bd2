"""Passes on any GPU, not only the first (issue 69): each pass runs with its model's device current, self-play
refuses a GPU its actors cannot see, and one precision setting per kind of device.

CUDA is mocked on the CPU (the device context is a function of the model's device); the tests at the end run
where a GPU is (the GPU checks): a pass on cuda:1 where a machine has two, float16 where a GPU lacks bf16.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import numpy as np
import pytest
import torch

import alphazero.nn.forward as forward_module
from alphazero.app.doctor import sample_leaves
from alphazero.config import apply_overrides, to_toml
from alphazero.errors import UserError
from alphazero.nn.cuda_device import device_context, indexed
from alphazero.nn.cuda_graphs import capture_graph
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import AlphaZeroNet, NetOutput
from alphazero.nn.parity import ParitySettings, compare_legal
from alphazero.presets import from_toml, get_preset
from alphazero.selfplay_devices import for_gpus

CPU = torch.device("cpu")


def _model() -> AlphaZeroNet:
    torch.manual_seed(0)
    return AlphaZeroNet(get_preset("tiny").network).eval()


# --- the device a pass runs on ------------------------------------------------------------------------


def test_the_device_context_is_a_function_of_the_device() -> None:
    assert isinstance(device_context(CPU), contextlib.nullcontext)
    assert device_context(torch.device("cuda:1")).idx == 1 and device_context(torch.device("cuda", 0)).idx == 0
    model = _model()
    assert indexed(torch.device("cuda:1"), model) == torch.device("cuda:1") and indexed(CPU, model) == CPU


class _FakeCuda:
    """Just enough of torch.cuda to capture and replay a graph on the CPU, minding which device is current."""

    def __init__(self) -> None:
        self.current = 0
        self.capture_streams: list[int] = []
        self.replayed_on: list[int] = []

    @contextlib.contextmanager
    def device(self, device: torch.device) -> Iterator[None]:
        before, self.current = self.current, device.index
        try:
            yield
        finally:
            self.current = before

    def stream_of(self, device: torch.device | None = None) -> types.SimpleNamespace:
        index = device.index if device is not None else self.current
        return types.SimpleNamespace(device=index, wait_stream=lambda other: None)

    @contextlib.contextmanager
    def graph(self, graph: object, stream: types.SimpleNamespace | None = None, **kwargs: object) -> Iterator[None]:
        # torch.cuda.graph's own capture stream lies on the device current at the process's first capture
        self.capture_streams.append(stream.device if stream is not None else 0)
        yield

    def patch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fake = self

        class Graph:
            def replay(self) -> None:
                fake.replayed_on.append(fake.current)

        for name, value in (("device", self.device), ("Stream", self.stream_of), ("current_stream", self.stream_of),
                            ("stream", lambda stream: contextlib.nullcontext()), ("CUDAGraph", Graph),
                            ("graph", self.graph)):
            monkeypatch.setattr(torch.cuda, name, value)


def test_a_graph_is_captured_and_replayed_on_its_buffers_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # On GPU 0 (the current device, which nothing sets) the capture and replay missed a model on cuda:1.
    cuda = _FakeCuda()
    cuda.patch(monkeypatch)
    passes_on: list[int] = []
    buffers = types.SimpleNamespace(device=torch.device("cuda", 1))
    replay = capture_graph(lambda p, s: passes_on.append(cuda.current) or ("out",), buffers, buffers)
    assert replay() == ("out",) and replay() == ("out",)
    assert passes_on == [1] * 4 and cuda.capture_streams == [1]  # three warm-ups and the capture, cuda:1's stream
    assert cuda.replayed_on == [1, 1] and cuda.current == 0  # and the current device as it was


@pytest.fixture
def device_contexts(monkeypatch: pytest.MonkeyPatch) -> list[list[object]]:
    """Replaces the Evaluator's device_context by one that notes each device entered; [inside] says whether a
    context is open now."""
    state: list[list[object]] = [[], [False]]

    @contextlib.contextmanager
    def noting(device: torch.device) -> Iterator[None]:
        state[0].append(device)
        state[1][0] = True
        try:
            yield
        finally:
            state[1][0] = False

    monkeypatch.setattr(forward_module, "device_context", noting)
    return state


class _Event:
    """A CUDA event stand-in that notes whether it was recorded inside the device context."""

    def __init__(self, inside: list[object]) -> None:
        self.inside = inside
        self.recorded_inside: list[object] = []

    def record(self) -> None:
        self.recorded_inside.append(self.inside[0])

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: object) -> float:
        return 1.0


def test_every_pass_capture_replay_and_event_runs_in_its_models_device_context(
        device_contexts: list[list[object]], monkeypatch: pytest.MonkeyPatch) -> None:
    entered, inside = device_contexts
    model = _model()
    made_inside: list[object] = []
    replayed_inside: list[object] = []

    def maker(planes: torch.Tensor, scalars: torch.Tensor):
        made_inside.append(inside[0])

        def replay() -> NetOutput:
            replayed_inside.append(inside[0])
            return model(planes, scalars)

        return replay

    events = (_Event(inside), _Event(inside))
    monkeypatch.setattr(forward_module, "_pass_events", lambda device: events)
    evaluator = Evaluator(model, CPU, forward="graphs", max_batch=8, runner_maker=maker,
                          parity=ParitySettings(mode="off"))
    evaluator.warm_up()
    planes, scalars, indices, counts = sample_leaves(8)
    evaluator.evaluate(planes, scalars)
    evaluator.evaluate_legal(planes, scalars, indices, counts)
    evaluator.profile_legal(planes, scalars, indices, counts)
    assert made_inside and set(made_inside) == {True}  # every capture
    assert len(replayed_inside) == 3 and set(replayed_inside) == {True}  # every replay
    assert [e.recorded_inside for e in events] == [[True], [True]]  # the events of the legal pass
    assert entered and set(entered) == {evaluator.device}


# --- self-play's GPUs ---------------------------------------------------------------------------------------


def test_self_play_refuses_a_gpu_its_actors_cannot_see() -> None:
    config = get_preset("tiny")
    with pytest.raises(UserError, match=r"^selfplay.device is 'cuda:1', but each self-play actor and server sees "
                                        r"only the GPU Ray gives it, as cuda:0: --set selfplay.device=cuda"):
        for_gpus(apply_overrides(config, ["selfplay.device=cuda:1"]), 2)
    assert for_gpus(apply_overrides(config, ["selfplay.device=cuda:0"]), 1).selfplay.device == "cuda"


# --- one precision setting per kind of device --------------------------------------------------------------


def test_each_kind_of_device_has_its_own_precision_setting() -> None:
    config = apply_overrides(get_preset("tiny"), ["selfplay.cpu_precision=float32", "selfplay.cuda_precision=float16",
                                                  "learner.cuda_precision=float32"])
    assert (config.selfplay.precision_for("cpu"), config.selfplay.precision_for("cuda")) == ("float32", "float16")
    assert (config.learner.precision_for("cpu"), config.learner.precision_for("cuda")) == ("auto", "float32")
    assert apply_overrides(config, ["learner.cuda_precision=float16"]).learner.precision_for("cuda") == "float16"
    with pytest.raises(UserError, match="learner.cuda_precision must be one of 'auto', 'bf16', 'float16', 'float32'"):
        apply_overrides(config, ["learner.cuda_precision=float8"])
    with pytest.raises(UserError, match="selfplay.cpu_precision must be one of 'auto', 'bf16', 'float32'"):
        apply_overrides(config, ["selfplay.cpu_precision=float16"])


def test_a_config_written_before_the_cuda_precisions_loads_with_auto() -> None:
    text = "\n".join(line for line in to_toml(get_preset("small")).splitlines()
                     if not line.startswith("cuda_precision") and "precision on a GPU" not in line)
    old = from_toml(text)
    assert old.selfplay.cuda_precision == old.learner.cuda_precision == "auto"
    assert old == get_preset("small")


# --- the GPU checks: where a GPU is -------------------------------------------------------------------------


def _agrees_with_float32_eager(evaluator: Evaluator, rows: int = 64) -> None:
    planes, scalars, indices, counts = (array.copy() for array in sample_leaves(rows))
    for _ in range(2):  # the first pass captures and is checked; the second replays and is timed
        logits, values = (a.copy() for a in evaluator.evaluate_legal(planes, scalars, indices, counts))
    cpu = Evaluator(_model(), CPU, precision="float32")
    ref_logits, ref_values = cpu.reference_legal(planes, scalars, indices, counts, rows=rows, width=logits.shape[1])
    assert compare_legal(logits, values, ref_logits, ref_values, counts, ParitySettings()).ok
    assert evaluator.fallbacks == [] and evaluator.bucket_failures == {}


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs (the GPU checks run it)")
def test_on_a_second_gpu_a_graphs_pass_agrees_with_float32_eager_and_leaves_the_current_device() -> None:
    evaluator = Evaluator(_model(), "cuda:1", forward="graphs", max_batch=64)
    evaluator.warm_up()
    _agrees_with_float32_eager(evaluator)
    assert torch.cuda.current_device() == 0 and evaluator.gpu_seconds > 0
    assert np.isfinite(evaluator.gpu_seconds)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the GPU checks run it)")
def test_on_each_gpu_auto_takes_the_precision_of_its_compute_capability() -> None:
    for index in range(torch.cuda.device_count()):
        native = torch.cuda.get_device_capability(index) >= (8, 0)
        evaluator = Evaluator(_model(), f"cuda:{index}", forward="graphs", max_batch=64)
        assert evaluator.precision == ("bf16" if native else "float16"
                                       if torch.cuda.get_device_capability(index) >= (7, 0) else "float32")
        _agrees_with_float32_eager(evaluator)
