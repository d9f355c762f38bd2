"""The user documents: no research-log references a user cannot follow, and no command line that fails."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from alphazero.app.cli import build_parser
from alphazero.nn.builtin import shipped_networks
from alphazero.store.sources import read_weights

ROOT = Path(__file__).resolve().parent.parent
# README, docs/ and the pages the package ships (the built-in network's card, the evaluation data's sources).
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "alphazero" / "weights" / "README.md",
             ROOT / "eval" / "data" / "README.md"]

# The rule: user documents cite EXPERIMENTS.md's entries by title and name no issue of this project; the history
# is CHANGELOG.md's and EXPERIMENTS.md's. Caught: "issue 22", "Issues 79 and 81", "issue #22", "PR 12", a bare
# "#22" (also across a line break). An upstream project's issue is written as its repository and number,
# "ray-project/ray#37288" (a '#' after a word character is allowed), or as a link; a '#' after '=' or '-' is a
# mate score (`wv=#21`, `wv=-#21`), not an issue.
ISSUE_NUMBER = re.compile(r"\b(?:issues?|PRs?|pull\s+requests?)\s+#?\d+|(?<![\w/=-])#\d+\b", flags=re.I)


def issue_numbers(text: str) -> list[str]:
    """Gets the issue references in ``text`` that the rule above forbids, each as found."""
    return [" ".join(match.group(0).split()) for match in ISSUE_NUMBER.finditer(text)]


def test_the_rule_catches_issue_numbers_and_leaves_upstream_references_and_mate_scores_alone() -> None:
    assert issue_numbers('EXPERIMENTS.md, "Issue 22", and issue\n  79\'s games; Issues 79 and 81; see #12') == [
        "Issue 22", "issue 79", "Issues 79", "#12"]
    assert issue_numbers("ray-project/ray#37288, a mate `wv=#21` or `wv=-#21`, the issue's bar") == []


@pytest.mark.parametrize("page", USER_DOCS, ids=lambda page: str(page.relative_to(ROOT)))
def test_user_documents_name_no_issue_numbers(page: Path) -> None:
    assert issue_numbers(page.read_text()) == []


@pytest.mark.parametrize("name", sorted(shipped_networks()))
def test_the_shipped_networks_describe_themselves_without_issue_numbers(name: str) -> None:
    # The description `doctor`, `train --init` and `pretrain --init` print of the weights they start from.
    described = read_weights(name).summary
    assert described.startswith("the built-in network") and issue_numbers(described) == []


def _commands(parser: argparse.ArgumentParser, command: str = "alphazero") -> Iterator[
        tuple[str, argparse.ArgumentParser]]:
    """Gets ``parser`` and every subcommand's parser below it, each with its command line ('alphazero bench uci')."""
    yield command, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{command} {name}")


def test_every_commands_help_names_no_issue_numbers() -> None:
    pages = {command: parser.format_help() for command, parser in _commands(build_parser())}
    assert {"alphazero train", "alphazero doctor", "alphazero uci"} <= set(pages)
    assert {command: issue_numbers(text) for command, text in pages.items() if issue_numbers(text)} == {}


def readme_command_lines() -> Iterator[list[str]]:
    """Gets the arguments of every `alphazero ...` command in README.md's bash blocks (after `&&`, `;`, `exec`
    and an absolute path to the script too); comments and continuation lines are read as a shell reads them."""
    text = (ROOT / "README.md").read_text()
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for segment in re.split(r"&&|\|\||;|\|", line):
                words = shlex.split(segment, comments=True)
                if words[:1] == ["exec"]:
                    words = words[1:]
                if words and Path(words[0]).name == "alphazero":
                    yield words[1:]


def _strict(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Gets ``parser`` with its subcommands' parsers refusing abbreviated flags (`--minute` for `--minutes`),
    so that a README line is checked as written."""
    for _, each in _commands(parser):
        each.allow_abbrev = False
    return parser


def _parses(args: list[str]) -> bool:
    try:
        _strict(build_parser()).parse_args(args)
    except SystemExit as stop:
        return stop.code == 0
    return True


def test_every_command_line_in_the_readme_parses_and_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    commands = list(readme_command_lines())
    assert {args[0] for args in commands} >= {"train", "uci", "pretrain", "doctor", "curve"}
    # Parsed as given, without --help: argparse stops at --help before it looks at the flags after it, so a
    # flag that does not exist fails only here.
    failed = [shlex.join(["alphazero", *args]) for args in commands if not _parses(args)]
    assert not failed, f"README.md shows command lines that alphazero refuses: {failed}"
    for args in commands:
        with pytest.raises(SystemExit) as stop:
            build_parser().parse_args([*args, "--help"])
        assert stop.value.code == 0
    capsys.readouterr()


def test_a_flag_that_does_not_exist_fails_the_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert _parses(["train", "--minutes", "60"])
    assert not _parses(["train", "--minute", "60"])  # abbreviated
    assert not _parses(["train", "--no-such-flag"]) and not _parses(["uci", "--weights", "builtin", "--elo", "1"])
    capsys.readouterr()


def test_the_manuals_synopsis_names_only_flags_that_exist() -> None:
    text = (ROOT / "docs" / "usage.md").read_text()
    synopsis = text.split("## The command line\n\n```\n", 1)[1].split("```", 1)[0]
    commands = {name: sub for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)
                for name, sub in action.choices.items()}
    unknown, command = [], ""
    for line in synopsis.splitlines():
        if line.startswith("alphazero "):
            command = line.split()[1]
        if command.startswith("--"):
            continue  # alphazero --version
        flags = set(commands[command]._option_string_actions)
        unknown += [f"{command} {flag}" for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line) if flag not in flags]
    assert command and not unknown
