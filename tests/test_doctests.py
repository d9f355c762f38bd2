"""The examples in the package's docstrings run, and say what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

from tests.helpers import ROOT

PACKAGES = ("alphazero", "mcts_ext", "selfplay", "learner", "eval")


def _modules_with_examples() -> list[str]:
    """Names the modules (Python and Cython) whose source holds a `>>>` example."""
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*")):
            if path.suffix in (".py", ".pyx") and ">>> " in path.read_text():
                parts = path.relative_to(ROOT).with_suffix("").parts
                names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = _modules_with_examples()


def test_the_examples_a_user_meets_first_are_collected() -> None:
    # The board, python-chess's move indices, Elo and a match: if the finder missed them, none would run.
    assert {"mcts_ext.position", "alphazero.chess.moves", "eval.elo", "eval.match"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert results.attempted > 0, f"{name}: no example found (a Cython function without its docstring?)"
    assert results.failed == 0, f"{name}: {results.failed} of {results.attempted} examples failed (printed above)"
