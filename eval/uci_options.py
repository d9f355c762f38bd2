"""The UCI engine's options, declared once: each one's UCI name, type, default, range and help.

The `uci` answer (UciOption.declaration), `setoption` (UciOption.parse), the
command line's flags (`alphazero uci --hash 256`: UciOption.flag, eval.cli)
and `alphazero uci --help`'s table (options_table) all read OPTIONS, as lc0
declares each engine option once; eval.uci applies a value where it takes
effect. docs/engine.md holds the same table (a test compares them).

Two options also answer to an older name that setoption still takes but the
`uci` answer does not declare (ALIASES): declared twice, a GUI that sends
every declared option at startup would set the one value twice, the second
time to its default.
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from alphazero.config import PRECISIONS
from alphazero.search import UCI_LEAVES_PER_BATCH, UCI_VISITS_PER_LEAF, parse_cpuct, parse_policy_temperature
from eval.timeman import MANAGERS
from mcts_ext.params import FPU_MODES, GUMBEL_UNVISITED

DEFAULT_MOVE_OVERHEAD_MS = 10
"""Milliseconds kept back each move: a local GUI or python-chess answers within a few, and what is kept back
beyond that is clock left unused (at a fast clock, a reserve above the increment leaves the smart manager
nothing to search with); chosen by games (EXPERIMENTS.md, "The engine under a clock")."""

INFINITE_NODES = 50_000_000
"""The simulation cap of `go infinite`, `go ponder` and timed searches. The tree's memory (Hash) ends a
long search first on most machines; this stays below 2^31, the search's budget being a C int."""

MAX_TREE_MEMORY_MB = 1 << 20
"""The most Hash takes: 1 TiB, more than the machines this runs on have."""

AUTO = "auto"
"""The value of a search setting's option that keeps the network's own (its run config's; the defaults for a model
file)."""

MAX_MULTIPV = 256
"""The most lines MultiPV may ask for (no position has more legal moves)."""

SEARCH = "search"
MODES = (SEARCH, "policy", "value", "av")
"""The Mode option's values: the tree search (the default), or one predictor's move at once (eval.uci_searchless)."""


def quoted(text: str, limit: int = 80) -> str:
    """Quotes outside input for a message, cut to `limit` characters.

    >>> quoted("e2e4"), quoted("x" * 100, limit=3)
    ("'e2e4'", "'xxx...'")
    """
    return repr(text if len(text) <= limit else text[:limit] + "...")


@dataclass(frozen=True)
class UciOption:
    """One engine option, as declared to the GUI: UCI name, type, default, range and help."""

    name: str
    type: str  # 'spin', 'check', 'combo' or 'string'
    default: int | bool | str
    help: str
    min: int | None = None
    max: int | None = None
    choices: tuple[str, ...] = ()  # the values of a combo
    check: Callable[[str], object] | None = None  # a string's check: raises ValueError saying what is expected

    @property
    def flag(self) -> str:
        """The command line's flag of the option, as lc0 spells its flags: the name's words in lower case,
        joined by dashes.

        >>> UciOption("Move Overhead", "spin", 10, "").flag, UciOption("UCI_ShowWDL", "check", False, "").flag
        ('--move-overhead', '--uci-show-wdl')
        """
        words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", self.name).replace("_", " ").split()
        return "--" + "-".join(word.lower() for word in words)

    def range_text(self) -> str:
        """The values the option takes: a spin's bounds, a combo's choices, a check's two, or `text`.

        >>> UciOption("Mode", "combo", "search", "", choices=("search", "policy")).range_text()
        'search|policy'
        """
        if self.type == "spin":
            return f"{self.min}..{self.max}"
        if self.type == "check":
            return "true|false"
        if self.type == "combo":
            return "|".join(self.choices)
        return "text"

    def summary(self) -> str:
        """Type, values and default in a few words, e.g. `spin 0..1048576, default 0`."""
        values = f" {self.range_text()}" if self.type != "string" else ""
        return f"{self.type}{values}, default {self.default_text()}"

    def default_text(self) -> str:
        """The default as a table shows it (an empty string as `(empty)`)."""
        if self.type == "check":
            return "true" if self.default else "false"
        return str(self.default) if self.default != "" else "(empty)"

    def declaration(self) -> str:
        """Returns the `option name ... type ...` line sent in answer to `uci`."""
        if self.type == "check":
            default = "true" if self.default else "false"
        else:
            default = str(self.default) if self.default != "" else "<empty>"
        line = f"option name {self.name} type {self.type} default {default}"
        if self.type == "spin":
            line += f" min {self.min} max {self.max}"
        line += "".join(f" var {choice}" for choice in self.choices)
        return line

    def parse(self, text: str) -> int | bool | str:
        """Converts a setoption value. Raises ValueError saying what is expected."""
        if self.type == "spin":
            try:
                value = int(text)
            except ValueError:
                raise ValueError(f"{self.name} takes an integer, got {quoted(text)}") from None
            assert self.min is not None and self.max is not None
            if not self.min <= value <= self.max:
                raise ValueError(f"{self.name} must lie in {self.min}..{self.max}, got {quoted(text)}")
            return value
        if self.type == "check":
            if text.lower() not in ("true", "false"):
                raise ValueError(f"{self.name} takes true or false, got {quoted(text)}")
            return text.lower() == "true"
        if self.type == "combo":
            if text.lower() not in self.choices:
                raise ValueError(f"{self.name} takes one of {', '.join(self.choices)}, got {text!r}")
            return text.lower()
        text = "" if text == "<empty>" else text
        if self.check is not None and text:
            self.check(text)
        return text


OPTIONS: tuple[UciOption, ...] = (
    UciOption("Nodes", "spin", 400, "simulations a move when `go` sets no limit, and the cap of `go depth`",
              1, INFINITE_NODES),
    UciOption("Weights", "string", "", "a model file or learner checkpoint; empty: the run's latest checkpoint"),
    UciOption("Device", "string", "auto", "where the network runs: auto, cpu, cuda or cuda:N"),
    UciOption("Precision", "combo", "auto", "the network's precision: auto (on a GPU bf16 from compute capability "
              "8.0, else float16 from 7.0, else float32; on a CPU bf16 where the processor has native bf16 and the "
              "engine's pass measured faster, once per machine, kept in the user's cache), bf16, float16 (a GPU's; "
              "a CPU runs float32) or float32",
              choices=PRECISIONS),
    UciOption("Threads", "spin", 0, "torch CPU threads for the network; 0: the cores less those other work keeps "
              "busy, chosen when the network loads and followed through each search (every core where a user's "
              "OMP_WAIT_POLICY=passive makes them wait passively)", 0, 1024),
    UciOption("Move Overhead", "spin", DEFAULT_MOVE_OVERHEAD_MS, "milliseconds kept back each move for the GUI "
              "and lag (Stockfish's name; MoveOverhead is taken too)", 0, 60_000),
    UciOption("TimeManager", "combo", "smart", "smart: the clock shared over the moves the game is expected to last, "
              "saved time spent later, early stops when the best move is settled; simple: clock / MovesToGo "
              "+ 0.75 increment", choices=MANAGERS),
    UciOption("MovesToGo", "spin", 30, "the simple time manager: moves assumed left when the GUI sends a clock "
              "without movestogo", 1, 1000),
    UciOption("LeavesPerBatch", "spin", UCI_LEAVES_PER_BATCH, "leaves per network call, gathered with virtual "
              "loss (more nodes a second, each a little less informed)", 1, 256),
    UciOption("VisitsPerLeaf", "spin", round(UCI_VISITS_PER_LEAF), "the batch grows with the tree: a network "
              "call takes at most the root's visits / this leaves, up to LeavesPerBatch; 0: full batches from the "
              "first call", 0, 1_000_000),
    UciOption("PolicyTemperature", "string", "", "softmax temperature of the network's prior (> 1 flattens it, "
              "as lc0's); empty: the network's own search.policy_temperature", check=parse_policy_temperature),
    UciOption("CPuct", "string", "", "PUCT's exploration constant c_init (lc0's CPuct): more explores more moves; "
              "empty: the network's own search.c_init", check=parse_cpuct),
    UciOption("MultiPV", "spin", 1, "root moves reported, each with its own score and line (multipv k)",
              1, MAX_MULTIPV),
    UciOption("UCI_ShowWDL", "check", False, "add `wdl W D L` (per mille) to the scores"),
    UciOption("Ponder", "check", False, "the GUI may send `go ponder`; pondering works either way"),
    UciOption("Mode", "combo", SEARCH, "search: the tree search, by go's limits; policy, value or av: no search, "
              "go answered at once with that player's move (the top prior; the move after which the network "
              "rates the opponent worst; the highest action value, for a network with an action-value head), "
              "clocks and nodes ignored", choices=MODES),
    UciOption("Hash", "spin", 0, "MiB the search tree may take (Stockfish's name; lc0's RamLimitMb; TreeMemoryMB "
              "is taken too); a search whose tree fills it stops there and answers with its best move (go infinite "
              "and ponder after stop or ponderhit); 0: half the machine's memory", 0, MAX_TREE_MEMORY_MB),
    UciOption("SyzygyPath", "string", "", "folders of Syzygy tablebases (.rtbw and .rtbz files), separated by "
              f"'{os.pathsep}': at a position they hold, only the moves that keep its result are played (among "
              "winning ones the fastest to zero the fifty-move counter, as Stockfish ranks them); elsewhere the "
              "search's leaves they hold take their win, draw or loss; empty: none"),
    UciOption("Debug Log File", "string", "", "a file the engine appends every line it hears (>>) and says (<<) "
              "to, and each search's start and end (--), each with the time to the microsecond (Stockfish's name): "
              "where a move's time went; empty: no log"),
    UciOption("FpuMode", "combo", AUTO, "PUCT's value of an unvisited move: reduction (the parent's minus "
              "fpu_value), absolute (fpu_value), action_value (the action-value head's value of the move, for a "
              "network with the head) or action_value_reduction (that value minus the reduction); auto: the "
              "network's own search.fpu_mode", choices=(AUTO, *FPU_MODES)),
    UciOption("GumbelUnvisited", "combo", AUTO, "Gumbel's completed Q of an unvisited move: mixed (one mixed "
              "value, as mctx) or action_value (the action-value head's value of the move); auto: the network's "
              "own search.gumbel_unvisited", choices=(AUTO, *GUMBEL_UNVISITED)),
    UciOption("SearchAlgorithm", "combo", "auto", "puct or gumbel (no noise; best with a node limit, as Sequential "
              "Halving plans for its budget); auto: the network's search.algorithm for a node limit, puct "
              "under a clock or until stop",
              choices=("auto", "puct", "gumbel")),
)
"""Every engine option, declared once: the `uci` answer and setoption both read this table."""

ALIASES = {"TreeMemoryMB": "Hash", "MoveOverhead": "Move Overhead"}
"""Older names setoption still takes (not declared, not on the command line): alias -> the option's name."""

OPTIONS_BY_NAME = {option.name.lower(): option for option in OPTIONS}
OPTIONS_BY_NAME.update({alias.lower(): OPTIONS_BY_NAME[name.lower()] for alias, name in ALIASES.items()})
"""The options by lower-case name, aliases included: UCI names are case-insensitive."""


def options_table(width: int = 100) -> str:
    """The options as a plain-text table, for `alphazero uci --help`: each one's UCI name, flag, type, values and
    default, then what it does (wrapped to ``width`` columns)."""
    lines = []
    for option in OPTIONS:
        lines.append(f"  {option.name} ({option.flag}): {option.summary()}")
        lines += textwrap.wrap(option.help, width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def options_markdown() -> str:
    """The options as the Markdown table docs/engine.md holds (a test checks that it does): option, flag, type,
    default, values and what it does."""
    rows = ["| option | flag | type | default | values | what it does |", "|---|---|---|---|---|---|"]
    for option in OPTIONS:
        values = option.range_text().replace("|", ", ") if option.type != "string" else "text"
        rows.append(f"| `{option.name}` | `{option.flag}` | {option.type} | `{option.default_text()}` | {values} | "
                    f"{option.help} |")
    return "\n".join(rows)
