"""`alphazero doctor` on the CPU: its table, its verdicts and its exit status (issue 23)."""

from __future__ import annotations

import re

import pytest
import torch

from alphazero.app import cli, doctor
from alphazero.nn.network import NetOutput

QUICK = ["doctor", "--batch-sizes", "1,8", "--seconds", "0.05", "--threads", "1"]


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_doctor_checks_the_cpu_path_says_the_gpu_was_not_checked_and_exits_0(capsys):
    assert cli.main(QUICK) == 0
    out = capsys.readouterr().out
    assert f"torch {torch.__version__}" in out and "CUDA is not available here: the GPU was not checked" in out
    assert "network: the built-in network" in out and "8 self-play leaves" in out
    rows = re.findall(r"^cpu eager \(float32\)\s+(\d+)\s+\S+\s+(\S+)\s+(\S+)\s+ok$", out, flags=re.MULTILINE)
    assert [row[0] for row in rows] == ["1", "8"]
    assert all(float(value) == 0.0 and float(policy) == 0.0 for _, value, policy in rows)  # the CPU path is eager
    assert re.search(r"^cpu eager \(float32\)\s+=> ok$", out, flags=re.MULTILINE)
    assert out.rstrip().endswith("doctor: ok: the CPU path (the GPU was not checked: CUDA is not available here) "
                                 "agrees with float32 eager")


def _wrong_values(planes: torch.Tensor, scalars: torch.Tensor):
    """A fake fast pass that ignores the network: uniform priors, a value of 0.9 everywhere."""
    rows = planes.shape[0]
    return lambda: NetOutput(torch.zeros(rows, 4672), torch.full((rows,), 0.9), None)


def test_a_mode_that_differs_from_float32_eager_is_a_mismatch_and_exit_1(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "supported_modes",
                        lambda cuda: [doctor.Mode("cpu", "graphs", runner_maker=_wrong_values), doctor.Mode("cpu")])
    assert cli.main([*QUICK, "--preset", "tiny"]) == 1
    out = capsys.readouterr().out
    assert "network: preset tiny's network, fresh weights" in out
    assert re.search(r"^cpu graphs \(float32\)\s+1\s+.*MISMATCH$", out, flags=re.MULTILINE)
    assert re.search(r"^cpu graphs \(float32\)\s+=> MISMATCH$", out, flags=re.MULTILINE)
    assert re.search(r"^cpu eager \(float32\)\s+=> ok$", out, flags=re.MULTILINE)
    assert "doctor: cpu graphs (float32) did not pass" in out


def test_a_mode_whose_capture_fails_is_reported_with_the_error(capsys, monkeypatch):
    def failing(planes: torch.Tensor, scalars: torch.Tensor):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    monkeypatch.setattr(doctor, "supported_modes", lambda cuda: [doctor.Mode("cpu", "graphs", runner_maker=failing)])
    assert cli.main(QUICK) == 1
    out = capsys.readouterr().out
    assert re.search(r"=> FAILED: bucket 1 fell back to eager \(RuntimeError: CUDA error: operation not permitted "
                     r"when stream is capturing\); bucket 8 fell back", out)


def test_doctor_refuses_bad_options_in_one_line(capsys):
    assert cli.main(["doctor", "--batch-sizes", "0,8"]) == 2
    said = capsys.readouterr().err.strip()
    assert said == "alphazero doctor: error: --batch-sizes must be positive integers, got '0,8'"


GPUS = [(torch.device("cuda", 0), "Tesla T4", (7, 5)), (torch.device("cuda", 1), "NVIDIA A100", (8, 0))]


def test_doctor_says_which_precision_each_gpu_gets_and_why() -> None:
    # Issue 69: bf16 was taken on every GPU, the T4's and the V100's too, which have no native bf16.
    t4, a100 = doctor.cuda_precision_lines(GPUS)
    assert t4.startswith("on cuda:0 (Tesla T4) precision 'auto' runs the network in float16 autocast (cuda:0, "
                         "compute capability 7.5: no native bf16")
    assert "and trains in float16 autocast (cuda:0, compute capability 7.5: no native bf16" in t4
    assert a100 == ("on cuda:1 (NVIDIA A100) precision 'auto' runs the network in bf16 autocast (cuda:1, compute "
                    "capability 8.0: native bf16) and trains in bf16 autocast (cuda:1, compute capability 8.0: "
                    "native bf16)")


def test_doctor_checks_each_gpu_in_the_precision_auto_takes_there(monkeypatch):
    monkeypatch.setattr(doctor, "cuda_devices", lambda: GPUS)
    labels = [mode.label for mode in doctor.supported_modes(True)]
    assert labels[:4] == ["cuda:0 eager (float16)", "cuda:0 graphs (float16)", "cuda:0 compile (float16)",
                          "cuda:1 graphs (bf16)"]  # a pass on a GPU other than the current one
    assert all(label.startswith("cpu") for label in labels[4:])
    assert [mode.label for mode in doctor.supported_modes(False)] == labels[4:]
