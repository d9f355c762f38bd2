"""Padding batches to buckets (the shapes a CUDA graph or a compiled pass is made for), on the CPU."""

from __future__ import annotations

import contextlib
import logging
import types

import numpy as np
import pytest
import torch

from alphazero.config import NetworkConfig
from alphazero.nn.forward import (
    BucketedForward,
    Evaluator,
    bucket_for,
    capture_graph,
    compile_per_bucket,
    start_buckets,
)
from alphazero.nn.network import AlphaZeroNet
from alphazero.nn.planes import COMPACT_PLANES, compact_to_torch
from tests.helpers import random_compact

NET = NetworkConfig(blocks=1, filters=8, policy_filters=8, policy_kernel=3, value_filters=2, value_hidden=16)
BUCKETS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]


def positions(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    return compact_to_torch(*random_compact(n, seed), "cpu")


@pytest.fixture(scope="module")
def model(one_torch_thread: None) -> AlphaZeroNet:
    torch.manual_seed(0)
    net = AlphaZeroNet(NET)
    with torch.no_grad():  # move batch norm off the identity, so rows' outputs differ
        for parameter in net.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    net.train()
    net(*positions(16, seed=9))
    return net.eval()


def test_a_batch_lands_in_the_smallest_bucket_that_holds_it():
    for rows in range(1, 1025):
        assert bucket_for(rows) == min(b for b in BUCKETS if b >= rows)
    assert bucket_for(1025) == 1536 and bucket_for(4096) == 4096


def test_the_largest_batch_is_a_bucket_of_its_own():
    assert bucket_for(500, max_batch=500) == 500  # a full batch is never padded
    assert bucket_for(400, max_batch=500) == 500  # rather than 512
    assert bucket_for(300, max_batch=500) == 384  # smaller buckets stay
    assert bucket_for(600, max_batch=500) == 768  # beyond it, the usual buckets
    with pytest.raises(ValueError):
        bucket_for(0)


def test_padding_rows_never_change_the_real_rows(model: AlphaZeroNet):
    forward = BucketedForward(model, torch.device("cpu"), max_batch=40)
    with torch.inference_mode():
        forward(*positions(40, seed=1))  # the buckets' buffers now hold other positions
        forward(*positions(12, seed=2))
        for rows, seed in ((5, 3), (9, 4), (13, 5), (40, 6), (33, 7)):
            planes, scalars = positions(rows, seed)
            padded, alone = forward(planes, scalars), model(planes, scalars)
            assert padded.policy_logits.shape == (rows, 4672) and padded.value.shape == (rows,)
            torch.testing.assert_close(padded.policy_logits, alone.policy_logits, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(padded.value, alone.value, rtol=1e-5, atol=1e-5)
    assert sorted(forward.inputs) == [6, 12, 16, 40]  # one padded buffer per bucket met
    assert forward.inputs[16][0].shape == (16, COMPACT_PLANES)


def test_graphs_need_cuda(model: AlphaZeroNet):
    planes, scalars = positions(2, seed=0)
    with pytest.raises(ValueError, match="CUDA"):
        capture_graph(model, planes, scalars)


def test_cuda_graphs_leave_the_cpu_path_eager(model: AlphaZeroNet):
    # (compile runs on a CPU too, since issue 32: see test_a_cpu_pass_compiles_one_bucket_its_largest_batch)
    evaluator = Evaluator(model, "cpu", forward="graphs", max_batch=64)
    assert evaluator.forward_mode == "eager"
    with pytest.raises(ValueError, match="forward must be one of"):
        Evaluator(model, "cpu", forward="fast")


# --- start buckets, fallback, capture and compile (issue 23) ------------------------------------------


def test_start_buckets_are_every_bucket_for_graphs_and_halves_for_compile():
    assert start_buckets(40, "graphs") == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40]
    assert start_buckets(1024, "compile") == [16, 32, 64, 128, 256, 512, 1024]
    assert start_buckets(1000, "compile") == [16, 32, 63, 125, 250, 500, 1000]
    assert start_buckets(1, "compile") == [1]
    forward = BucketedForward(lambda p, s: None, torch.device("cpu"), mode="compile", max_batch=1024)
    assert [forward.bucket_of(rows) for rows in (1, 16, 17, 600, 1024)] == [16, 16, 32, 1024, 1024]
    assert forward.bucket_of(1500) == bucket_for(1500)  # beyond the largest batch: the usual buckets


def _counting_maker(model: AlphaZeroNet, made: list[int]):
    """A fake fast pass: each bucket's runner is the eager model on that bucket's buffers."""

    def make(planes: torch.Tensor, scalars: torch.Tensor):
        made.append(planes.shape[0])
        return lambda: model(planes, scalars)

    return make


def test_warm_up_makes_every_start_bucket_so_no_pass_makes_one_later(model: AlphaZeroNet):
    # Issue 23, defect 10: a bucket met mid-run compiled then, stalling the actor.
    made: list[int] = []
    evaluator = Evaluator(model, "cpu", forward="compile", max_batch=64, runner_maker=_counting_maker(model, made))
    evaluator.warm_up()
    assert sorted(made) == start_buckets(64, "compile")
    planes, scalars = positions(64, seed=3)
    indices = np.tile(np.arange(20, dtype=np.int32), (64, 1))
    counts = np.full(64, 20, np.int32)
    for rows in (64, 1, 5, 33, 64):
        evaluator.evaluate_legal(planes[:rows].numpy().view(np.uint64), scalars[:rows].numpy(), indices, counts)
    assert sorted(made) == start_buckets(64, "compile")  # no pass made one


def test_a_bucket_whose_capture_fails_runs_eager_and_the_run_goes_on(model: AlphaZeroNet, caplog):
    # Issue 23, defect 3: a failed capture escaped submit_legal and stopped the run.
    def failing(planes: torch.Tensor, scalars: torch.Tensor):
        if planes.shape[0] == 8:
            raise RuntimeError("operation not permitted when stream is capturing\nmore detail")
        return lambda: model(planes, scalars)

    forward = BucketedForward(model, torch.device("cpu"), mode="graphs", make=failing, max_batch=8)
    with torch.inference_mode(), caplog.at_level(logging.WARNING, logger="alphazero.nn.forward"):
        for rows, seed in ((7, 1), (8, 2), (3, 3), (6, 4)):
            planes, scalars = positions(rows, seed)
            out, alone = forward(planes, scalars), model(planes, scalars)
            torch.testing.assert_close(out.policy_logits, alone.policy_logits, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(out.value, alone.value, rtol=1e-5, atol=1e-5)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [("forward 'graphs', bucket 8: RuntimeError: operation not permitted when stream is "
                         "capturing; that bucket runs eager from now on")]
    assert forward.failures == {8: "RuntimeError: operation not permitted when stream is capturing"}
    assert forward.runners[8] is None and None not in (forward.runners[3], forward.runners[6])  # only that one


def test_capture_is_thread_local(monkeypatch: pytest.MonkeyPatch):
    # Issue 23, defect 10: a global capture mode let any CUDA call from another thread spoil it.
    recorded: dict[str, object] = {}
    replays: list[int] = []

    class FakeStream:
        def wait_stream(self, other: object) -> None:
            pass

    class FakeGraph:
        def replay(self) -> None:
            replays.append(1)

    @contextlib.contextmanager
    def fake_graph(graph: FakeGraph, **kwargs: object):
        recorded.update(kwargs)
        yield

    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: FakeStream())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", fake_graph)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    buffers = types.SimpleNamespace(device=torch.device("cuda", 0))
    calls: list[int] = []
    replay = capture_graph(lambda p, s: calls.append(1) or ("out",), buffers, buffers)
    assert recorded["capture_error_mode"] == "thread_local" and isinstance(recorded["stream"], FakeStream)
    assert len(calls) == 4  # three warm-up passes and the captured one
    assert replay() == ("out",) and replays == [1]


def test_compile_makes_the_input_constants_before_its_first_trace(model: AlphaZeroNet,
                                                                  monkeypatch: pytest.MonkeyPatch):
    # Issue 23, defect 10: made inside the first trace, the constants changed a guarded dict: a second compile.
    from torch._dynamo.testing import CompileCounter

    import alphazero.nn.planes as planes_module

    torch._dynamo.reset()
    monkeypatch.setattr(planes_module, "_DEVICE_CONSTANTS", {})
    counter = CompileCounter()
    forward = BucketedForward(model, torch.device("cpu"), mode="compile",
                              make=compile_per_bucket(model, backend=counter), max_batch=4)
    with torch.inference_mode():
        for seed in range(3):
            forward(*positions(4, seed))
    assert counter.frame_count == 1
    torch._dynamo.reset()


def test_compile_uses_the_processs_torch_threads(model: AlphaZeroNet):
    # Issue 23, defect 10: every actor compiled with a compile worker per core of the machine.
    import torch._inductor.config as inductor_config

    seen: list[int] = []

    def backend(graph: torch.fx.GraphModule, inputs: list[torch.Tensor]):
        seen.append(inductor_config.compile_threads)
        return graph.forward

    torch._dynamo.reset()
    make = compile_per_bucket(model, backend=backend)
    planes, scalars = positions(2, seed=0)
    with torch.inference_mode():
        make(planes.clone(), scalars.clone())()
    assert seen and set(seen) == {torch.get_num_threads()} == {1}  # one_torch_thread: as an actor runs
    torch._dynamo.reset()


def test_compiling_keeps_inductors_tf32_advice_to_itself(model: AlphaZeroNet):
    # Issue 37: on an H200 Inductor advised TF32 (for the heads' float32 layers, float32 on purpose) once per
    # actor, 15 times in a bench's output. The advice is raised inside the compilation: a backend stands in.
    import warnings

    def backend(graph: torch.fx.GraphModule, inputs: list[torch.Tensor]):
        warnings.warn("TensorFloat32 tensor cores for float32 matrix multiplication available but not enabled.",
                      UserWarning, stacklevel=1)
        warnings.warn("another warning", UserWarning, stacklevel=1)
        return graph.forward

    torch._dynamo.reset()
    make = compile_per_bucket(model, backend=backend)
    planes, scalars = positions(2, seed=0)
    with warnings.catch_warnings(record=True) as caught, torch.inference_mode():
        warnings.simplefilter("always")
        make(planes.clone(), scalars.clone())()
    messages = [str(warning.message) for warning in caught]
    assert "another warning" in messages and not any("TensorFloat32" in text for text in messages)
    torch._dynamo.reset()


def test_a_cpu_pass_compiles_one_bucket_its_largest_batch(model: AlphaZeroNet, monkeypatch: pytest.MonkeyPatch):
    # Issue 32: a CPU actor compiles once, at start, for its full batch (no CUDA graphs); smaller batches pad.
    import alphazero.nn.forward as forward_module

    made: list[int] = []

    def cpu_maker(compiled_model: torch.nn.Module, *, cuda_graphs: bool):
        assert not cuda_graphs
        maker = compile_per_bucket(compiled_model, backend="eager")  # Dynamo without Inductor: quick in a test

        def make(planes: torch.Tensor, scalars: torch.Tensor):
            made.append(planes.shape[0])
            return maker(planes, scalars)

        return make

    monkeypatch.setattr(forward_module, "compile_per_bucket", cpu_maker)
    torch._dynamo.reset()
    evaluator = Evaluator(model, "cpu", forward="compile", precision="float32", max_batch=8)
    evaluator.warm_up()
    assert made == [8] and evaluator.describe_pass() == "compile, float32"
    planes, scalars = random_compact(3, seed=5)
    indices = np.tile(np.arange(20, dtype=np.int32), (3, 1))
    counts = np.full(3, 20, dtype=np.int32)
    logits, values = evaluator.evaluate_legal(planes, scalars, indices, counts)
    with torch.inference_mode():
        out = model(*compact_to_torch(planes, scalars, "cpu"))
    np.testing.assert_allclose(values, out.value.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logits, out.policy_logits[:, :20].numpy(), rtol=1e-5, atol=1e-5)
    assert made == [8] and not evaluator.fallbacks  # padded into the one bucket, and checked: it agreed
    assert not Evaluator(model, "cpu", forward="graphs", max_batch=8)._bucketed  # no graphs on a CPU: eager
    torch._dynamo.reset()


def test_pyproject_asks_for_a_torch_with_what_the_code_calls():
    # Issue 23, defect 10: the floor (2.3) was below torch._dynamo.config.recompile_limit (2.7) and nn.RMSNorm (2.4).
    import re
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    floor = next(re.fullmatch(r"torch>=(\d+)\.(\d+)", item) for item in project["dependencies"]
                 if item.startswith("torch"))
    assert floor is not None and (int(floor[1]), int(floor[2])) >= (2, 7)
    assert hasattr(torch._dynamo.config, "recompile_limit") and hasattr(torch.nn, "RMSNorm")
