"""What the self-play driver says when an actor's call raises: a user error in one line, a bug with its traceback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from alphazero.errors import UserError
from selfplay.driver import actor_failure


class _Failing:
    """An actor whose play() fails as a self-play actor's can: with a user error, or with a bug."""

    def play(self, kind: str) -> None:
        if kind == "user":
            raise UserError("checkpoint step_000000010.pt is corrupt: delete it or restore it")
        if kind == "memory":
            raise MemoryError("the search ran out of memory")
        _average_of_nothing()

    def nested(self, other: Any) -> None:  # a call that waits on another actor's failing call
        import ray

        ray.get(other.play.remote("bug"))


def _average_of_nothing() -> float:
    return sum([]) / len([])  # ZeroDivisionError: the bug the traceback must point at


@pytest.fixture(scope="module")
def actor() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        yield ray.remote(num_cpus=0)(_Failing).remote()
    finally:
        ray.shutdown()


def _failure(ref: Any) -> UserError:
    """The driver's error for a failed call, as it makes it when ray.get raises (selfplay.driver._collect)."""
    import ray
    from ray.exceptions import RayTaskError

    with pytest.raises(RayTaskError) as raised:
        ray.get(ref)
    return actor_failure(raised.value)


def test_a_user_error_in_an_actor_is_one_line(actor: Any, capsys: pytest.CaptureFixture[str]) -> None:
    error = _failure(actor.play.remote("user"))
    assert str(error) == "a self-play actor failed: checkpoint step_000000010.pt is corrupt: delete it or restore it"
    assert capsys.readouterr().err == ""


def test_a_bug_in_an_actor_shows_its_traceback_before_the_line(actor: Any,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    error = _failure(actor.play.remote("bug"))
    assert str(error) == "a self-play actor failed with ZeroDivisionError: division by zero (its traceback is above)"
    assert "\n" not in str(error)
    err = capsys.readouterr().err
    assert "ray::_Failing.play()" in err  # Ray's header of the actor's traceback
    assert "in _average_of_nothing" in err and "sum([]) / len([])" in err  # where it was raised
    assert err.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "\x1b[" not in err  # no terminal colours in what may go to a file


def test_a_bug_behind_a_nested_call_is_named_by_its_own_type(actor: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    other = ray.remote(num_cpus=0)(_Failing).remote()
    error = _failure(actor.nested.remote(other))
    assert str(error).startswith("a self-play actor failed with ZeroDivisionError: division by zero")
    assert "in _average_of_nothing" in capsys.readouterr().err


def test_an_actor_out_of_memory_is_one_line_for_the_cli_to_advise_on(actor: Any,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import ray
    from ray.exceptions import RayTaskError

    from alphazero.out_of_memory import out_of_memory_in, out_of_memory_message

    try:
        try:
            ray.get(actor.play.remote("memory"))
        except RayTaskError as error:
            raise actor_failure(error) from None  # as selfplay.driver._collect raises it
    except UserError as error:
        failure = error
    assert str(failure) == "a self-play actor failed: the search ran out of memory"
    assert capsys.readouterr().err == ""  # not a bug: no traceback
    exhausted = out_of_memory_in(failure)  # what the CLI's handler finds under the one line
    assert exhausted is not None
    assert out_of_memory_message(exhausted, "selfplay").startswith("out of memory: the machine's memory ran out")
