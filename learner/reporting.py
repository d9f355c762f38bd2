"""What the learner reports as it trains: its step figures' running means and TensorBoard tags, and its progress line.

The means are kept on the device, so that a step needs no sync; the learner
reads them every ``log_every`` steps (learner.loop). The progress line is a
live line on a terminal, plain lines elsewhere, and log records when output
is off.
"""

from __future__ import annotations

import logging
from dataclasses import fields

import torch

from alphazero.console import LiveDisplay
from learner.trainer import StepStats

__all__ = ["TB_NAMES", "VALIDATION_LAYOUT", "Progress", "Running"]

_FIGURES = tuple(f.name for f in fields(StepStats))
# TensorBoard's Custom Scalars tab: each held-out figure in one chart with its
# window-sample twin (and the training curve), so the gap is read off one plot.
VALIDATION_LAYOUT = {"validation: held out vs trained on": {
    "policy loss": ["Multiline", ["loss/policy", "validation/train_policy_loss", "validation/policy_loss"]],
    "value loss": ["Multiline", ["loss/value", "validation/train_value_loss", "validation/value_loss"]],
    "value accuracy": ["Multiline", ["value/accuracy", "validation/train_value_accuracy",
                                     "validation/value_accuracy"]],
    "policy top-1": ["Multiline", ["validation/train_policy_top1", "validation/policy_top1"]],
}}
TB_NAMES = {"total": "loss/total", "policy": "loss/policy", "value": "loss/value", "value_mse": "loss/value_mse",
            "entropy": "policy/entropy", "value_accuracy": "value/accuracy", "grad_norm": "grad_norm",
            "soft_policy": "loss/soft_policy", "q": "loss/q", "anchor": "loss/anchor"}
"""The TensorBoard tag of each step figure."""


class Running:
    """Sums of step figures since the last log, kept on the device so that a step needs no sync."""

    def __init__(self) -> None:
        self.sums: torch.Tensor | None = None
        self.steps = 0
        self.samples = 0
        self.seconds = 0.0  # training time (sampling, transfer, step), waits excluded
        self.waited = 0.0

    def add(self, stats: StepStats, samples: int, seconds: float) -> None:
        figures = torch.stack([getattr(stats, name).float() for name in _FIGURES])
        self.sums = figures if self.sums is None else self.sums + figures
        self.steps += 1
        self.samples += samples
        self.seconds += seconds

    def means(self) -> dict[str, float]:
        """Gets the mean of every figure (one device sync); empty before the first step."""
        if self.sums is None or self.steps == 0:
            return {}
        return dict(zip(_FIGURES, (self.sums / self.steps).tolist(), strict=True))

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


class Progress:
    """A live status line on a terminal; plain lines elsewhere; the logger when output is off."""

    def __init__(self, enabled: bool, log: logging.Logger) -> None:
        self.enabled = enabled
        self._log = log  # the caller's logger, which whoever watches the learner listens to
        self._display = LiveDisplay(enabled=enabled, terminal_only=True, transient=True, refresh_per_second=4).start()

    def message(self, text: str) -> None:
        """Prints a line that stays (above the live line)."""
        if not self.enabled:
            self._log.info(text)
        elif self._display.live:
            self._display.message(text)
        else:
            print(text, flush=True)

    @property
    def width(self) -> int | None:
        """The live line's width in columns; None without a live line (printed lines may be long)."""
        return self._display.width

    def status(self, text: str, *, milestone: bool = False) -> None:
        """Shows ``text`` as the live line; without a terminal, prints it at milestones only."""
        if self._display.live:
            self._display.show(text)
        elif milestone and self.enabled:
            print(text, flush=True)

    def close(self) -> None:
        self._display.stop()
