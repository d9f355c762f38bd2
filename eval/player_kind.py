"""A kind of player in the registry, and the readers its factory uses for a spec's options.

A kind (PlayerKind) is a factory with its help and the options it accepts;
eval.agents keeps the registry of kinds and turns player specs into agents.
The readers (int_option, number_option, ptemp_option) raise UserError naming
the option, so a factory checks its options before it starts anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from alphazero.config_values import INT_RANGE
from alphazero.errors import UserError
from alphazero.search import parse_policy_temperature
from eval.agent import Agent

PlayerFactory = Callable[[dict[str, str], Mapping[str, Any]], "Agent"]
"""Builds an agent from a spec's options (strings, already checked against the
kind's declared options) and the caller's context (see parse_player)."""


@dataclass(frozen=True)
class PlayerKind:
    """A kind of player in the registry.

    `options` maps each accepted option to a line of help; `positional`, if
    set, is the option that a bare value fills (`search:400` -> sims=400 with
    positional="sims").
    """

    factory: PlayerFactory
    help: str
    options: Mapping[str, str]
    positional: str | None = None


def player_kind(factory: PlayerFactory, *, help: str, options: Mapping[str, str] | None = None,
                positional: str | None = None) -> PlayerKind:
    """Makes a kind of player (see register_player).

    Raises ValueError if `positional` is not among the options.
    """
    opts = dict(options or {})
    if positional is not None and positional not in opts:
        raise ValueError(f"positional option {positional!r} is not among the options {sorted(opts)}")
    return PlayerKind(factory, help, opts, positional)


def int_option(options: Mapping[str, str], key: str, default: int | None = None, *,
               bounds: tuple[int, int] | None = INT_RANGE) -> int | None:
    """Reads an integer option for a factory; `default` when absent.

    `bounds` is its range, inclusive: by default a C int's (what the search and the engines take), so that a
    huge value is refused here and not where it reaches C; None for an option that takes any integer (a
    seed of Python's generator).

    Raises UserError quoting the value when it is not an integer or lies outside `bounds`.
    """
    if key not in options:
        return default
    try:
        value = int(options[key])
    except ValueError:
        raise UserError(f"option {key}={options[key]!r} must be an integer") from None
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise UserError(f"option {key}={options[key]!r} must lie in [{bounds[0]}, {bounds[1]}]")
    return value


def number_option(options: Mapping[str, str], key: str, parse: Callable[[str], float]) -> float | None:
    """Reads a number option for a factory with ``parse`` (which says what it expects); None when absent.

    Raises UserError naming the option when ``parse`` refuses the value.
    """
    if key not in options:
        return None
    try:
        return parse(options[key])
    except ValueError as error:
        raise UserError(f"option {key}: {error}") from None


def ptemp_option(options: Mapping[str, str]) -> float | None:
    """Reads the `ptemp` option, the prior's softmax temperature (a positive, finite number); None when absent."""
    return number_option(options, "ptemp", parse_policy_temperature)
