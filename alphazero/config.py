"""The run configuration: one tree of frozen dataclasses, saved as TOML (the presets: alphazero.presets).

A run's ``config.toml`` is written once when the run is created and read back by
every process that opens the run. Command-line overrides (``search.simulations=100``)
change a config for one process; they are not written back.

Sections and whether they may change when a run is reopened
(alphazero.config_compat says which fields are fixed):

- ``network`` (fixed): the architecture; the checkpoints only load into it.
- ``learner`` (free, except ``learner.optimizer``, fixed because the saved
  optimizer state only loads into the same optimizer).
- ``search``, ``selfplay``, ``eval``, ``pretrain`` (free): they shape new games,
  matches and pretraining data, not what was already saved.

This module holds the sections, the whole Config, its TOML text and the
overrides. The search settings are defined in mcts_ext.params (the
``[search]`` section is SearchSettings plus the resignation calibration), the
types of field values in alphazero.config_values, reading a saved config in
alphazero.presets, and the device self-play runs on in
alphazero.selfplay_devices.

Example::

    config = apply_overrides(Config(), ["search.simulations=100"])
    assert config.search.simulations == 100 and "simulations = 100" in to_toml(config)

Over 600 lines: the sections are one tree whose every field is declared once with its help, beside the TOML text
and the overrides that read them all; split by section, what a run's config.toml lists would be scattered.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from alphazero.config_values import check_range, coerce, parse_text, toml_value, type_hints
from alphazero.errors import UserError
from alphazero.search import SELFPLAY, search_params
from mcts_ext.params import SearchSettings, settings_of

# AlphaZero's batch size: the learning rates below are quoted for it and scaled
# linearly to the configured batch (Goyal et al., 2017).
REFERENCE_BATCH_SIZE = 4096
# A seed's range: numpy's generators take no negative seed, and TOML's integers are signed 64-bit (torch's
# manual_seed takes any of them); larger than the C int every other integer field is bounded by (INT_RANGE).
SEED_RANGE = (0, 2**63 - 1)
DEFAULT_PRESET = "tiny"  # the preset a config names when it names none (alphazero.presets)
# How a CUDA forward pass runs (alphazero.nn.forward): here so that the CLI lists them without loading torch.
FORWARD_MODES = ("eager", "graphs", "compile")
CPU_FORWARD_MODES = ("eager", "compile")  # a CPU has no CUDA graphs
# When the Evaluator checks a fast pass against float32 eager (alphazero.nn.parity): here for the same reason.
PARITY_MODES = ("auto", "always", "off")
# What a network's pass or training step runs in (alphazero.nn.precision): 'auto' is bf16 on a CPU where native and
# faster, on a GPU where native (compute capability 8.0 and up), else float16 (inference) or float32.
PRECISIONS = ("auto", "bf16", "float16", "float32")
CPU_PRECISIONS = ("auto", "bf16", "float32")  # a CPU has no fast float16
# The learner trains float16 with loss scaling (learner/loss_scaling.py).
LEARNER_CUDA_PRECISIONS = ("auto", "bf16", "float16", "float32")


def _field(default: Any, doc: str) -> Any:
    """Declares a config field with its default and a one-line description (written into config.toml)."""
    return field(default=default, metadata={"doc": doc})


class _Section:
    """Validation shared by the config sections: types, choices, ranges.

    A number field's range is its MINIMUM and MAXIMUM, where given; an
    integer's ends default to a C int's (alphazero.config_values.INT_RANGE).
    """

    SECTION: ClassVar[str] = ""
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {}
    MINIMUM: ClassVar[dict[str, float]] = {}
    MAXIMUM: ClassVar[dict[str, float]] = {}
    # Groups of fields the canonical text (the hashes) leaves out, each while all of its fields hold their defaults.
    CANONICAL_AT_DEFAULT: ClassVar[tuple[tuple[str, ...], ...]] = ()

    def __post_init__(self) -> None:
        hints = type_hints(type(self))  # type: ignore[arg-type]  # classes hash; mypy reads their instances'
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = coerce(f"{self.SECTION}.{f.name}", getattr(self, f.name), hints[f.name])
            object.__setattr__(self, f.name, value)
        for name, spec in settings_of(type(self)).items():  # the search settings (mcts_ext.params)
            problem = spec.problem(name, getattr(self, name))
            if problem is not None:
                raise UserError(f"{self.SECTION}.{problem}")
        for name, allowed in self.CHOICES.items():
            if getattr(self, name) not in allowed:
                raise UserError(f"{self.SECTION}.{name} must be one of {', '.join(map(repr, allowed))}, "
                                f"got {getattr(self, name)!r}")
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            check_range(f"{self.SECTION}.{f.name}", getattr(self, f.name), hints[f.name], self.MINIMUM.get(f.name),
                        self.MAXIMUM.get(f.name))
        self._check()

    def _check(self) -> None:
        """Checks constraints between fields (overridden where needed)."""


@dataclass(frozen=True)
class NetworkConfig(_Section):
    """The network: a residual tower or a Chessformer, and its two heads. Fixed for the life of a run.

    ``kind`` picks the body; the fields marked (resnet) or (chessformer) are
    read by that kind only, the others by both.
    """

    SECTION: ClassVar[str] = "network"
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"kind": ("resnet", "chessformer"),
                                                     "value_head": ("scalar", "wdl"),
                                                     "action_value_head": ("none", "logit", "hl_gauss"),
                                                     "action_value_shape": ("squares", "policy")}
    MINIMUM: ClassVar[dict[str, float]] = {"blocks": 0, "filters": 1, "policy_filters": 1,
                                           "value_filters": 1, "value_hidden": 1,
                                           "layers": 1, "embedding": 1, "heads": 1, "ffn": 1,
                                           "action_value_bins": 2, "action_value_filters": 1, "se_ratio": 0,
                                           "global_pool_channels": 0}
    ACTION_VALUE_FIELDS: ClassVar[tuple[str, ...]] = ("action_value_head", "action_value_bins",
                                                      "action_value_filters", "action_value_shape")
    # Networks without a head or SE blocks hash as they did before those fields existed (checkpoints carry the hash).
    CANONICAL_AT_DEFAULT: ClassVar[tuple[tuple[str, ...], ...]] = (ACTION_VALUE_FIELDS, ("reply_policy_head",),
                                                                    ("se_ratio",), ("moves_left_head",),
                                                                    ("global_pool_channels",), ("soft_policy_head",))

    kind: str = _field("resnet", "'resnet': AlphaZero's residual tower; 'chessformer': a transformer over the 64 "
                                 "squares with relative square positions (Monroe & Chalmers)")
    blocks: int = _field(20, "(resnet) residual blocks in the tower (each: conv-BN-ReLU-conv-BN, skip, ReLU)")
    filters: int = _field(256, "(resnet) channels of the stem and of every 3x3 convolution in the tower")
    se_ratio: int = _field(0, "(resnet) squeeze-and-excitation in every residual block, as lc0's: each channel's "
                              "mean over the board, a hidden layer of filters // se_ratio units, then a sigmoid "
                              "scale and a bias per channel on the block's branch before the skip; 0 = none "
                              "(lc0's example 6x64 net uses 2)")
    policy_filters: int = _field(256, "channels of the resnet policy head's 3x3 conv-BN-ReLU before its last conv; "
                                      "chessformer: width of the attention policy's square tokens, queries and keys")
    policy_kernel: int = _field(3, "(resnet) kernel of the policy head's last conv to 73 move planes: 1 or 3")
    value_head: str = _field("scalar", "'scalar': one tanh output (AlphaZero); 'wdl': win/draw/loss logits")
    value_filters: int = _field(1, "channels per square of the value head (resnet: its 1x1 conv-BN-ReLU)")
    value_hidden: int = _field(256, "units of the value head's hidden fully connected layer")
    layers: int = _field(8, "(chessformer) encoder layers")
    embedding: int = _field(256, "(chessformer) width of each square's token through the encoder")
    heads: int = _field(8, "(chessformer) attention heads per layer; embedding must be a multiple of it")
    ffn: int = _field(256, "(chessformer) hidden units of each layer's feed-forward sublayer")
    action_value_head: str = _field("none", "a win probability for every move (ChessBench's action values, "
                                            "alphazero.nn.action_values): 'none', 'logit' (one logit a move, "
                                            "binary cross-entropy) or 'hl_gauss' (action_value_bins bins on [0, 1], "
                                            "the HL-Gauss loss)")
    action_value_bins: int = _field(128, "(hl_gauss) bins of the action-value head's distribution over [0, 1]")
    action_value_filters: int = _field(32, "('squares' shape) channels of the action-value head's per-square from "
                                           "and to features and of each move's hidden layer")
    action_value_shape: str = _field("squares", "how the action-value head reads the body: 'squares' (a move's "
                                                "value from its two squares' features through one hidden layer) "
                                                "or 'policy' (a second policy head, its logits the moves' value "
                                                "logits; 'logit' form only; starts from the policy head's weights "
                                                "when loaded from a network without the head)")
    global_pool_channels: int = _field(0, "(resnet) KataGo's global pooling in every third residual block from "
                                          "the second (blocks 2, 5, 8, ...): this many of the block's first "
                                          "convolution's channels, batch-normed and ReLU'd, give their mean and "
                                          "max over the board to a linear layer that adds a bias to each of its "
                                          "other channels; 0 = none")
    reply_policy_head: bool = _field(False, "a second policy head, trained (learner.reply_policy_weight) on the "
                                            "next position's search policy, the opponent's reply (KataGo's "
                                            "auxiliary target); only training runs it, search never does")
    moves_left_head: bool = _field(False, "lc0's moves-left head: the plies left in the game from the position "
                                          "(a 1x1 conv to 8 channels, or the chessformer's 8 per square, then 128 "
                                          "hidden units and one non-negative output), trained by "
                                          "learner.moves_left_weight; only training runs it: search does not read "
                                          "it (a later change may, to prefer shorter wins)")
    soft_policy_head: bool = _field(False, "(resnet) KataGo's auxiliary soft policy head, of the policy head's "
                                           "shape, trained (learner.soft_policy_loss_weight) on the search's policy "
                                           "at temperature learner.soft_policy_temperature; only training runs it "
                                           "(the chessformer always has one)")

    def _check(self) -> None:
        if self.soft_policy_head and self.kind != "resnet":
            raise UserError("network.soft_policy_head is the resnet's: the chessformer always has a soft policy "
                            "head (learner.soft_policy_loss_weight trains it); set network.soft_policy_head=false")
        if self.policy_kernel not in (1, 3):
            raise UserError(f"network.policy_kernel must be 1 or 3, got {self.policy_kernel}")
        if self.action_value_shape == "policy" and self.action_value_head == "hl_gauss":
            raise UserError("network.action_value_shape = 'policy' takes network.action_value_head = 'logit' (one "
                            "logit a move, as the policy's), not 'hl_gauss'")
        if self.se_ratio and self.kind != "resnet":
            raise UserError(f"network.se_ratio = {self.se_ratio} asks for squeeze-and-excitation in a resnet's "
                            f"residual blocks; network.kind = {self.kind!r} has none: leave it at 0")
        if self.se_ratio > self.filters:
            raise UserError(f"network.se_ratio ({self.se_ratio}) must be at most network.filters ({self.filters}): "
                            f"the squeeze-and-excitation's hidden layer has filters // se_ratio units, at least 1")
        if self.global_pool_channels and self.kind != "resnet":
            raise UserError(f"network.global_pool_channels = {self.global_pool_channels} asks for global pooling in "
                            f"a resnet's residual blocks; network.kind = {self.kind!r} has none: leave it at 0")
        if self.global_pool_channels >= self.filters:
            raise UserError(f"network.global_pool_channels ({self.global_pool_channels}) must be below "
                            f"network.filters ({self.filters}): the pooled channels bias the block's others")
        if self.global_pool_channels and self.kind == "resnet" and self.blocks < 2:
            # Pooling sits in every third block from the second: a one-block tower would take the setting and
            # build no pooling at all.
            raise UserError(f"network.global_pool_channels = {self.global_pool_channels} pools in every third "
                            f"residual block from the second; a tower of {self.blocks} block has none: set "
                            f"network.blocks to 2 or more, or leave it at 0")
        if self.kind == "chessformer" and self.embedding % self.heads:
            raise UserError(f"network.embedding ({self.embedding}) must be a multiple of network.heads "
                            f"({self.heads})")


@dataclass(frozen=True)
class SearchConfig(_Section, SearchSettings):
    """The self-play search: PUCT (AlphaZero pseudocode values as defaults) or Gumbel AlphaZero.

    Its search settings, their help, ranges and choices are defined once, in
    mcts_ext.params.SearchSettings; this section adds how self-play picks its
    resignation threshold (CALIBRATION_FIELDS). alphazero.search.search_params
    turns it into a search's parameters.
    """

    SECTION: ClassVar[str] = "search"
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"resign_mode": ("calibrated", "fixed", "off")}
    MINIMUM: ClassVar[dict[str, float]] = {"resign_false_positive_target": 0.0, "resign_min_cases": 1}
    # Fields that tell the self-play driver how to pick the threshold; not MultiGameSearch options.
    CALIBRATION_FIELDS: ClassVar[tuple[str, ...]] = ("resign_mode", "resign_threshold",
                                                     "resign_false_positive_target", "resign_min_cases")

    resign_mode: str = _field("calibrated", "'calibrated': the threshold comes from the played-through games "
                                            "(AlphaGo Zero); 'fixed': resign_threshold; 'off': never resign")
    resign_threshold: float = _field(-0.9, "with resign_mode = 'fixed': resign when the root value stays below this")
    resign_false_positive_target: float = _field(0.05, "calibrated: the highest threshold whose share of "
                                                       "would-resign sides that did not lose stays at most this")
    resign_min_cases: int = _field(100, "calibrated: would-have-resigned cases needed before anyone resigns")

    def _check(self) -> None:
        if self.resign_false_positive_target > 1.0:
            raise UserError(f"search.resign_false_positive_target must lie in [0, 1], got "
                            f"{self.resign_false_positive_target}")
        # What the search itself refuses (Gumbel's rules and resign_threshold's range among it) is checked
        # where the search's parameters are made: self-play's, from this section, with the fixed threshold.
        try:
            search_params(self, SELFPLAY, resign_threshold=self.resign_threshold)
        except ValueError as error:
            raise UserError(f"search: {error}") from None


@dataclass(frozen=True)
class SelfPlayConfig(_Section):
    """Self-play actors and how they reach the network."""

    SECTION: ClassVar[str] = "selfplay"
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"inference": ("local", "server"),
                                                     "overlap": ("auto", "on", "off"),
                                                     "cuda_forward": FORWARD_MODES,
                                                     "transport": ("disk", "ray"),
                                                     "parity_check": PARITY_MODES,
                                                     "cpu_precision": CPU_PRECISIONS,
                                                     "cuda_precision": PRECISIONS,
                                                     "cpu_forward": CPU_FORWARD_MODES}
    MINIMUM: ClassVar[dict[str, float]] = {"actors": 0, "games_per_actor": 1, "shard_games": 1, "sink_window": 1,
                                           "server_batch_size": 0, "server_wait_ms": 0.0,
                                           "weights_poll_seconds": 0.0, "max_games": 0, "shard_seconds": 0.0,
                                           "gpu_games_per_actor": 0, "gpu_leaves_per_game": 0, "gpu_actors": 0,
                                           "parity_share": 0.0,
                                           "parity_atol": 0.0, "parity_rtol": 0.0}

    actors: int = _field(0, "self-play actors; 0 = one per CPU core")
    games_per_actor: int = _field(64, "games each actor plays at once; their leaves share one network batch")
    shard_games: int = _field(64, "complete games per shard file in run/selfplay/")
    # Games finish one by one, so a full shard of a GPU actor's games could keep the first ones from the learner
    # for minutes: an actor's first game goes out alone, and no game waits longer than this.
    shard_seconds: float = _field(20.0, "most seconds a finished game waits in its actor for the rest of its "
                                        "shard: older, the shard goes out with the games it has (an actor's "
                                        "first game goes out at once); 0 = only full shards")
    inference: str = _field("local", "'local': each actor runs the network; 'server': batching GPU servers")
    device: str = _field("auto", "device for local inference and the servers: 'auto' (a GPU when self-play has GPUs, "
                                 "--gpus > 0, else the CPU), 'cpu' (refuses --gpus) or 'cuda' (needs --gpus; each "
                                 "actor or server runs on the GPU Ray gives it, so cuda:N is refused)")
    server_batch_size: int = _field(0, "most positions in one forward pass of an inference server; 0 = the requests "
                                       "of every lane it serves at once (its actors x games_per_actor x "
                                       "search.leaves_per_game), so that one pass merges several actors' batches")
    # lc0's multiplexing backend and KataGo's waitPopUpToN take what is waiting and never idle the GPU for
    # company: requests that come during a pass make up the next one anyway.
    server_wait_ms: float = _field(0.0, "longest an idle inference server waits for more requests before a pass; "
                                        "0 = it takes what is ready at once")
    weights_poll_seconds: float = _field(30.0, "how often an actor looks for a newer checkpoint")
    save_pgn: bool = _field(True, "also write every game as PGN under run/games/")
    transport: str = _field("disk", "how shards reach run/selfplay: 'disk' (each actor writes them: one machine or "
                                    "storage every node sees) or 'ray' (sent through Ray to a writer on the run's "
                                    "node; no shared disk)")
    sink_window: int = _field(4, "with transport 'ray': most shards an actor has sent and not yet seen written; "
                                 "at the limit it waits (nothing is dropped)")
    max_games: int = _field(0, "stop after this many games in all; 0 = until stopped")
    # With GPUs (--gpus) a batch must be far larger than a CPU core wants; these take over there.
    gpu_games_per_actor: int = _field(0, "games_per_actor when self-play has GPUs (--gpus > 0); 0 = games_per_actor")
    # Four leaves a game make a GPU's batch from a quarter of the games, so each game moves four times as often
    # (EXPERIMENTS.md, "The first network trained on a GPU, one H200").
    gpu_leaves_per_game: int = _field(0, "search.leaves_per_game when self-play has GPUs and searches with PUCT "
                                         "(Gumbel self-play needs 1); 0 = search.leaves_per_game")
    gpu_actors: int = _field(0, "actors when self-play has GPUs and --actors is not given; "
                                "0 = one per CPU core but one (the driver's)")
    overlap: str = _field("auto", "two batches in flight per actor (each half of its games searched while the "
                                  "other is in the network): 'auto' (on for a GPU or a server), 'on', 'off'")
    # Graphs everywhere: compiled passes can be faster, but self-play actors each compiling their buckets
    # at start take minutes; 'compile' is for one long-lived process that can wait (an inference server).
    # Measured in EXPERIMENTS.md, "GPU: one H100" and "The GPU path on a GPU".
    cuda_forward: str = _field("graphs", "how a CUDA pass runs: 'graphs' (a CUDA graph per batch-size bucket), "
                                         "'compile' (torch.compile reduce-overhead per bucket; minutes at start in "
                                         "each actor or server) or 'eager'; a bucket "
                                         "whose capture or compilation fails runs eager (one warning)")
    # One precision per kind of device (precision_for): a CPU's 'auto' is timed, a GPU's a function of its kind.
    cpu_precision: str = _field("auto", "the network's precision on a CPU (actors, a CPU server): 'auto' (bf16 "
                                        "autocast where the processor has native bf16, AVX512-BF16 or AMX, and a "
                                        "pass timed at start is faster; else float32), 'bf16' or 'float32'")
    cuda_precision: str = _field("auto", "the network's precision on a GPU (actors, servers): 'auto' (bf16 autocast "
                                         "where the GPU has native bf16, compute capability 8.0 and up; else float16 "
                                         "autocast where it has float16 tensor cores, 7.0 and up; else float32), "
                                         "'bf16', 'float16' or 'float32'; the parity check watches either")
    # Compiled passes pay for their seconds of compilation at start in any run longer than a minute
    # (EXPERIMENTS.md, "bf16 on the CPU").
    cpu_forward: str = _field("compile", "how an actor's (or a CPU server's) pass runs on a CPU: 'compile' "
                                         "(torch.compile with Inductor's C++ kernels for the largest batch, made "
                                         "when the actor starts; without a C++ compiler it runs eager, with one "
                                         "warning) or 'eager'")
    # The parity check, after lc0's `check` backend: the fast pass (bf16, graphs or compiled) against float32
    # eager. The tolerances leave room above what bf16 moves the built-in network's outputs by, for deeper
    # networks (EXPERIMENTS.md, "One definition of each setting, modules by concern").
    parity_check: str = _field("auto", "compare the fast CUDA pass with float32 eager on the same batch: 'auto' (the "
                                       "first pass of each batch-size bucket, the first after each weight update, "
                                       "and parity_share of the others), 'always' or 'off'; on a mismatch: one "
                                       "warning, then eager (then float32) from there on")
    parity_share: float = _field(0.01, "with parity_check = 'auto': the share of the other passes checked (each "
                                       "costs a float32 eager pass and a synchronisation)")
    parity_atol: float = _field(0.1, "parity: a value or a legal move's probability may differ from float32 eager "
                                     "by parity_atol + parity_rtol x |eager's|")
    parity_rtol: float = _field(0.1, "parity: the relative part of the tolerance (see parity_atol)")

    def _check(self) -> None:
        if self.parity_share > 1.0:
            raise UserError(f"selfplay.parity_share must lie in [0, 1], got {self.parity_share}")

    def precision_for(self, device_type: str) -> str:
        """Gets the precision setting of the network on a device of ``device_type`` ('cpu', 'cuda')."""
        return self.cuda_precision if device_type == "cuda" else self.cpu_precision


@dataclass(frozen=True)
class LearnerConfig(_Section):
    """The training loop over the replay window."""

    SECTION: ClassVar[str] = "learner"
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"optimizer": ("sgd", "adam", "adamw", "nadam"),
                                                     "trainable": ("all", "policy_head", "action_value_head"),
                                                     "cpu_precision": CPU_PRECISIONS,
                                                     "cuda_precision": LEARNER_CUDA_PRECISIONS}
    MINIMUM: ClassVar[dict[str, float]] = {
        "batch_size": 1, "momentum": 0.0, "weight_decay": 0.0, "training_steps": 0,
        "window_positions": 1, "min_window_positions": 1, "max_sample_reuse": 0.0,
        "checkpoint_every": 1, "keep_checkpoints": 1, "keep_every_steps": 0, "keep_every_minutes": 0.0,
        "log_every": 1, "value_loss_weight": 0.0, "value_target_q_weight": 0.0, "validation_share": 0.0,
        "validation_positions": 1, "validate_every": 0, "beta2": 0.0, "epsilon": 0.0, "warmup_steps": 0,
        "soft_policy_loss_weight": 0.0, "soft_policy_temperature": 1.0, "q_loss_weight": 0.0,
        "start_anchor_weight": 0.0, "mix_share": 0.0, "mix_decay_steps": 0, "clip_grad_norm": 0.0,
        "action_value_loss_weight": 0.0, "action_value_rank_weight": 0.0, "action_value_rank_temperature": 1e-3,
        "reply_policy_weight": 0.0, "value_target_short_term_weight": 0.0, "value_target_short_term_plies": 1,
        "moves_left_weight": 0.0, "policy_surprise_weight": 0.0, "seed": SEED_RANGE[0],
    }
    MAXIMUM: ClassVar[dict[str, float]] = {"seed": SEED_RANGE[1]}

    batch_size: int = _field(4096, "positions per training step")
    optimizer: str = _field("sgd", "'sgd' (with momentum, as AlphaZero), 'adam', or 'adamw' / 'nadam' "
                                   "(decoupled weight decay)")
    learning_rates: tuple[float, ...] = _field((0.2, 0.02, 0.002, 0.0002),
                                               "learning rate per stage, quoted for batch 4096 (see scale_lr)")
    lr_boundaries: tuple[int, ...] = _field((100_000, 300_000, 500_000),
                                            "steps at which the next learning rate starts")
    scale_lr: bool = _field(True, "multiply learning rates by batch_size / 4096 (linear scaling)")
    warmup_steps: int = _field(0, "steps over which the learning rate rises linearly from 0 to its first value")
    momentum: float = _field(0.9, "SGD momentum (beta1 of adam, adamw and nadam)")
    beta2: float = _field(0.999, "beta2 of adam, adamw and nadam")
    epsilon: float = _field(1e-8, "epsilon of adam, adamw and nadam")
    weight_decay: float = _field(1e-4, "sgd/adam: L2 weight decay c (AlphaZero's 1e-4); adamw/nadam: the "
                                       "decoupled decay rate, applied to weight matrices only")
    clip_grad_norm: float = _field(0.0, "clip the gradient's global norm to this; 0 = measure it only "
                                        "(TensorBoard grad_norm)")
    value_loss_weight: float = _field(1.0, "weight of the value loss beside the policy loss")
    value_target_q_weight: float = _field(0.0, "value target = (1 - w) * game result + w * the search's root "
                                               "value (Leela's q-ratio); 0 = the game result alone")
    value_target_short_term_weight: float = _field(0.0, "share s of the value target taken from the search's root "
                                                        "value value_target_short_term_plies ahead in the same game "
                                                        "(for the position's mover; the game's result where the game "
                                                        "has no sample that far on): target = (1 - w - s) * result "
                                                        "+ w * root value + s * that value; 0 = off")
    value_target_short_term_plies: int = _field(6, "plies ahead of value_target_short_term_weight's root value")
    reply_policy_weight: float = _field(0.0, "weight of the reply-policy loss (network.reply_policy_head): the "
                                             "cross-entropy of the head's softmax over the next position's legal "
                                             "moves against that position's search policy; 0 = off")
    moves_left_weight: float = _field(0.0, "weight of the moves-left loss (network.moves_left_head): lc0's Huber "
                                           "loss of the predicted and the actual plies to the game's end, both "
                                           "over 20, delta 10 plies (to the resignation or the ply limit where "
                                           "the game ended so); 0 = off")
    soft_policy_loss_weight: float = _field(0.0, "weight of the auxiliary soft-policy loss: a second policy head "
                                                 "(the chessformer's, or the resnet's network.soft_policy_head) "
                                                 "learns the search's policy at soft_policy_temperature (KataGo "
                                                 "weighs it 8); 0 = off")
    policy_surprise_weight: float = _field(0.0, "KataGo's policy surprise weighting: the share of each self-play "
                                                "game's training samples given to its positions in proportion to "
                                                "how far the search's policy lay from the network's prior (KL), "
                                                "the rest evenly; a position is trained on as often as its weight "
                                                "says, the game's count kept (KataGo: 0.5); 0 = every position "
                                                "once")
    soft_policy_temperature: float = _field(4.0, "temperature T of the soft-policy targets: pi^(1/T), "
                                                 "renormalised over the legal moves")
    q_loss_weight: float = _field(0.0, "weight of the auxiliary q loss (chessformer only): its second value "
                                       "head learns the search's root value (squared error)")
    mix_dir: str = _field("", "a folder of shards mixed into every batch, such as a pretraining run's pretrain/ "
                              "(relative paths start at the run directory); '' = none")
    mix_share: float = _field(0.0, "share of each batch drawn from mix_dir at step 0 (the rest from self-play)")
    mix_decay_steps: int = _field(0, "steps over which mix_share falls linearly to 0; 0 = it stays")
    action_value_loss_weight: float = _field(1.0, "weight of the action-value head's loss (network.action_value_head) "
                                                  "on the moves whose shards give a win probability (policy_wins: "
                                                  "Stockfish labels', or self-play's search values where its "
                                                  "network has the head)")
    action_value_rank_weight: float = _field(0.0, "weight of a listwise loss on the action-value head's ranking: "
                                                  "per position, the cross-entropy of softmax(head's win "
                                                  "probabilities / T) against softmax(targets / T), T = "
                                                  "action_value_rank_temperature; 0 = off (the pointwise loss alone)")
    action_value_rank_temperature: float = _field(0.05, "temperature T of action_value_rank_weight's softmaxes, on "
                                                        "win probabilities (pretrain.temperature's scale)")
    start_anchor_weight: float = _field(0.0, "weight of a loss pulling the net towards the run's start (its step-0 "
                                             "network): KL(start's policy || policy) over the legal moves plus the "
                                             "squared value difference; 0 = off")
    training_steps: int = _field(700_000, "stop after this many steps; 0 = until stopped")
    window_positions: int = _field(20_000_000, "replay window: the newest positions sampled from")
    min_window_positions: int = _field(500_000, "positions self-play must have written before training")
    window_growth: float = _field(1.0, "growing replay window (KataGo's shuffler): positions the window grows by "
                                       "per new position once min_window_positions have entered it (see "
                                       "window_exponent); 1 with window_exponent 1 = a fixed window_positions")
    window_exponent: float = _field(1.0, "growing replay window (KataGo's shuffler), in (0, 1]: past "
                                         "min_window_positions the window grows as the positions seen to this power, "
                                         "up to window_positions (LearnerConfig.window_size); 1 = linearly")
    max_sample_reuse: float = _field(1.0, "most samples per self-play position; the learner waits beyond it")
    checkpoint_every: int = _field(1000, "steps between checkpoints (actors pick up new weights from them)")
    keep_checkpoints: int = _field(5, "newest checkpoints kept")
    keep_every_steps: int = _field(50_000, "also keep older checkpoints at multiples of this step; 0 = none")
    keep_every_minutes: float = _field(20.0, "also keep the first checkpoint after every this many minutes of the "
                                             "run (its points on `alphazero curve`); 0 = none")
    log_every: int = _field(100, "steps between TensorBoard scalars")
    validation_share: float = _field(0.02, "share of games (by a hash of the game id) held out of training "
                                           "for validation")
    validation_positions: int = _field(50_000, "the newest held-out positions kept as the validation set")
    validate_every: int = _field(1000, "steps between validation/* figures on the held-out games; 0 = never")
    device: str = _field("auto", "training device: auto, cpu, cuda or cuda:N")
    cpu_precision: str = _field("auto", "training precision on a CPU (learn, train, pretrain): 'auto' (bf16 "
                                        "autocast with float32 weights and optimiser where the processor has native "
                                        "bf16 and a step timed at start is faster; else float32), 'bf16' or 'float32'")
    cuda_precision: str = _field("auto", "training precision on a GPU: 'auto' (bf16 autocast with float32 weights and "
                                         "optimiser where the GPU has native bf16, compute capability 8.0 and up; "
                                         "float16 autocast with loss scaling from 7.0; else float32), 'bf16', "
                                         "'float16' or 'float32'")
    compile: bool = _field(False, "torch.compile the network for training")
    freeze_batch_norm: bool = _field(False, "keep the batch-norm running statistics the weights came with (and "
                                            "normalise training batches with them) instead of re-estimating them "
                                            "on the training data: for fine-tuning a pretrained network")
    trainable: str = _field("all", "what learns: 'all' the network; 'policy_head' alone (the tower, the value head "
                                   "and any action-value head keep the weights they came with); or "
                                   "'action_value_head' alone (network.action_value_head: the tower, the policy "
                                   "and the value heads keep theirs); either head alone needs freeze_batch_norm")
    seed: int = _field(0, "seed of the learner's sampling and initial weights")
    # A learner waiting at the reuse cap trains again as soon as the next shard lands (no idle learner while
    # games wait unread); listing the folder twice a second costs nothing beside a training step.
    poll_seconds: float = _field(0.5, "how often a learner waiting for shards looks for new ones")

    def _check(self) -> None:
        if len(self.learning_rates) != len(self.lr_boundaries) + 1:
            raise UserError(f"learner.learning_rates needs one more entry than learner.lr_boundaries, got "
                            f"{len(self.learning_rates)} rates and {len(self.lr_boundaries)} boundaries")
        if list(self.lr_boundaries) != sorted(set(self.lr_boundaries)):
            raise UserError(f"learner.lr_boundaries must be strictly increasing, got {list(self.lr_boundaries)}")
        # 0 is allowed: a run whose weights must not move (what checks the training loop's invariants).
        if any(rate < 0 for rate in self.learning_rates):
            raise UserError(f"learner.learning_rates must be 0 or more, got {list(self.learning_rates)}")
        for name in ("value_target_q_weight", "value_target_short_term_weight", "validation_share", "mix_share",
                     "policy_surprise_weight"):
            if getattr(self, name) > 1.0:
                raise UserError(f"learner.{name} must lie in [0, 1], got {getattr(self, name)}")
        if self.value_target_q_weight + self.value_target_short_term_weight > 1.0:
            raise UserError(f"learner.value_target_q_weight + learner.value_target_short_term_weight are the shares "
                            f"of the value target besides the game's result: at most 1 together, got "
                            f"{self.value_target_q_weight} + {self.value_target_short_term_weight}")
        if not self.poll_seconds > 0:
            raise UserError(f"learner.poll_seconds must be positive, got {self.poll_seconds}")
        if self.trainable != "all" and not self.freeze_batch_norm:
            raise UserError(f"learner.trainable = {self.trainable!r} keeps the rest of the network as it came, "
                            f"batch-norm statistics included: set learner.freeze_batch_norm=true as well")
        if not self.window_growth > 0:
            raise UserError(f"learner.window_growth must be positive, got {self.window_growth}")
        if not 0 < self.window_exponent <= 1:
            raise UserError(f"learner.window_exponent must lie in (0, 1], got {self.window_exponent}")
        if self.min_window_positions > self.window_positions:
            raise UserError(f"learner.min_window_positions ({self.min_window_positions}) exceeds "
                            f"learner.window_positions ({self.window_positions})")
        if not (self.momentum < 1.0 and self.beta2 < 1.0):
            raise UserError(f"learner.momentum and learner.beta2 must be below 1, got {self.momentum} "
                            f"and {self.beta2}")

    def precision_for(self, device_type: str) -> str:
        """Gets the training precision setting on a device of ``device_type`` ('cpu', 'cuda')."""
        return self.cuda_precision if device_type == "cuda" else self.cpu_precision

    def window_size(self, total: int) -> int:
        """Gets the replay window's size once ``total`` positions have entered it (KataGo's shuffler).

        All of them while there are fewer than m = min_window_positions (the
        learner waits until then), then m + g (total^e - m^e) / (e m^(e - 1)),
        g = window_growth and e = window_exponent: it grows by g positions per
        new one at m and tapers as a power law for e < 1. At most
        window_positions; g = e = 1 is min(total, window_positions).

        >>> LearnerConfig(window_positions=1_000, min_window_positions=100).window_size(400)
        400
        >>> grows = LearnerConfig(window_positions=1_000_000, min_window_positions=2_048, window_exponent=0.75)
        >>> [grows.window_size(n) for n in (1_000, 2_048, 1_000_000, 10_000_000)]
        [1000, 2048, 282959, 1000000]
        """
        m, g, e = self.min_window_positions, self.window_growth, self.window_exponent
        if total < m:
            return min(total, self.window_positions)
        size = m + g * (total**e - m**e) / (e * m ** (e - 1))
        return min(self.window_positions, int(size))

    def mix_rows(self, step: int) -> int:
        """Gets how many rows of training step ``step``'s batch come from mix_dir (0 without one)."""
        if not self.mix_dir or self.mix_share <= 0:
            return 0
        share = self.mix_share
        if self.mix_decay_steps > 0:
            share *= max(0.0, 1.0 - step / self.mix_decay_steps)
        return min(self.batch_size - 1, round(share * self.batch_size))

    def learning_rate(self, step: int) -> float:
        """Gets the learning rate of training step ``step`` (0-based): scaled to the batch size, and
        rising linearly over the first ``warmup_steps`` steps."""
        stage = sum(1 for boundary in self.lr_boundaries if step >= boundary)
        scale = self.batch_size / REFERENCE_BATCH_SIZE if self.scale_lr else 1.0
        warmup = min(1.0, (step + 1) / self.warmup_steps) if self.warmup_steps > 0 else 1.0
        return self.learning_rates[stage] * scale * warmup


@dataclass(frozen=True)
class EvalConfig(_Section):
    """Matches between agents and the Elo table."""

    SECTION: ClassVar[str] = "eval"
    MINIMUM: ClassVar[dict[str, float]] = {"games": 2, "simulations": 1, "every_steps": 0, "time_share": 0.0,
                                           "start_games": 0, "fall_margin": 0.0}

    games: int = _field(100, "games per match, half with each colour")
    simulations: int = _field(400, "simulations per move of the search agents")
    stockfish_elos: tuple[int, ...] = _field((1400, 1700, 2000), "UCI_Elo levels of the Stockfish opponents")
    every_steps: int = _field(10_000, "learner steps between quick evaluations during alphazero train/learn "
                                      "(the Elo curve in TensorBoard; needs Stockfish); 0 = only when asked")
    time_share: float = _field(0.1, "most share of wall time the quick evaluations take: the next one waits "
                                    "until the last one's time is this share of the time since it started")
    # 92 games: the suite's 46 openings, colours swapped.
    start_games: int = _field(92, "games of each agent against the same agent of the run's step-0 network (the "
                                  "start: the --init weights or fresh ones); quick evaluations play the policy's "
                                  "twin match at this size and the search's at 16 games; 0 = none")
    fall_margin: float = _field(100.0, "Elo below the start at which an evaluated agent is reported as fallen "
                                       "(when its whole 95% interval is below the start)")
    probe_data: str = _field("", "a folder of Stockfish labels (alphazero pretrain --data-only), relative to the "
                                 "run or absolute: every checkpoint the periodic evaluation rates is also probed "
                                 "on it (eval.probe: TensorBoard probe/*); '' = off")

    def _check(self) -> None:
        if not 0.0 < self.time_share <= 1.0:
            raise UserError(f"eval.time_share must lie in (0, 1], got {self.time_share}")


@dataclass(frozen=True)
class PretrainConfig(_Section):
    """Supervised pretraining data (alphazero pretrain): Stockfish labels and PGN games."""

    SECTION: ClassVar[str] = "pretrain"
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"pgn_value": ("eval", "result")}
    MINIMUM: ClassVar[dict[str, float]] = {
        "temperature": 0.0, "multipv": 0, "hash_mb": 1, "shard_positions": 1, "opening_plies": 0,
        "random_move_fraction": 0.0, "game_plies": 1, "pgn_smoothing": 0.0, "mate_preference": 0.0,
        "random_side_fraction": 0.0, "endgame_fraction": 0.0, "puzzle_alternatives": 0, "seed": SEED_RANGE[0],
    }
    MAXIMUM: ClassVar[dict[str, float]] = {"seed": SEED_RANGE[1]}

    temperature: float = _field(0.05, "Stockfish labels: temperature of the softmax over the legal moves' "
                                      "win probabilities (0..1) that is the policy target; 0 = the best move")
    multipv: int = _field(0, "Stockfish labels: moves scored per position (MultiPV); 0 = every legal move, "
                             "moves left unscored get no policy share")
    hash_mb: int = _field(16, "Stockfish labels: hash table of each Stockfish process, in MB (cleared per position)")
    seed: int = _field(0, "Stockfish labels: seed of the random-opening games whose positions are labelled")
    opening_plies: int = _field(8, "Stockfish labels: each game opens with 0..this many uniformly random plies")
    random_move_fraction: float = _field(0.05, "Stockfish labels: share of later moves played uniformly at random "
                                               "(the others are drawn from the label's policy)")
    game_plies: int = _field(200, "Stockfish labels: a labelling game stops after this many plies")
    shard_positions: int = _field(1024, "positions per shard in run/pretrain/ (a Stockfish shard is the unit "
                                        "a restart resumes from)")
    pgn_smoothing: float = _field(0.0, "PGN games: share of the played move's policy target spread evenly "
                                       "over all legal moves (0 = the played move only)")
    pgn_value: str = _field("eval", "PGN games: the value target: 'eval' (an engine's evaluation in a move's "
                                    "comment, TCEC's wv= or [%eval], as a win probability; the game's result "
                                    "where a position has none) or 'result' (the game's result)")
    mate_preference: float = _field(2.0, "Stockfish labels: logits added to a mate in N moves' policy logit per move "
                                         "below 10 (taken from being mated), so the policy finishes won games")
    random_side_fraction: float = _field(0.25, "Stockfish labels: share of labelling games in which one side plays "
                                               "uniformly random moves throughout (lopsided games: how to win won "
                                               "positions)")
    endgame_fraction: float = _field(0.2, "Stockfish labels: share of labelling games that start from a random won "
                                          "endgame (a queen or rook and more against a king with at most two "
                                          "pawns): how a lone king is mated")
    label_value: bool = _field(True, "Stockfish labels: false writes them without a value target (shards marked "
                                     "value_target 'none', Stockfish's value kept for analysis): the learner trains "
                                     "only the policy on them")
    puzzle_alternatives: int = _field(0, "Stockfish labels of puzzle CSVs: for each position where the solver "
                                         "moves, also label the positions after up to this many of its other "
                                         "legal moves, drawn at random: what a missed tactic leads to (0 = none)")

    def _check(self) -> None:
        for name in ("random_move_fraction", "pgn_smoothing", "random_side_fraction", "endgame_fraction"):
            if getattr(self, name) > 1.0:
                raise UserError(f"pretrain.{name} must lie in [0, 1], got {getattr(self, name)}")


@dataclass(frozen=True)
class Config:
    """The whole configuration of a run; ``preset`` names the preset it started from."""

    preset: str = DEFAULT_PRESET
    network: NetworkConfig = field(default_factory=NetworkConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    selfplay: SelfPlayConfig = field(default_factory=SelfPlayConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)


SECTIONS: dict[str, type[Any]] = {
    "network": NetworkConfig,
    "search": SearchConfig,
    "selfplay": SelfPlayConfig,
    "learner": LearnerConfig,
    "eval": EvalConfig,
    "pretrain": PretrainConfig,
}


def field_hints(section: str) -> dict[str, Any]:
    cls = SECTIONS[section]
    hints = type_hints(cls)  # type: ignore[arg-type]  # (as in _Section.__post_init__)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def unknown_key(section: str, key: str) -> UserError:
    names = list(field_hints(section))
    close = difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean {section}.{close[0]}?)" if close else ""
    return UserError(f"unknown config key {section}.{key}{hint}; {section} has: {', '.join(names)}")


def unknown_section(name: str) -> UserError:
    return UserError(f"unknown config section {name!r}; the sections are: {', '.join(SECTIONS)}")


# --- TOML -------------------------------------------------------------------------

def section_toml(section: Any, *, comments: bool) -> list[str]:
    """Writes one section as TOML lines, each field after its help as a comment unless ``comments`` is False.

    Without comments (the canonical text, which the hashes read) each group of
    the section's CANONICAL_AT_DEFAULT fields is left out while every one of its
    fields holds its default, so that fields added since keep a config that does
    not use them hashing as before.
    """
    lines = [f"[{section.SECTION}]"]
    defaults = {f.name: f.default for f in dataclasses.fields(section)}
    optional = set() if comments else {name for group in section.CANONICAL_AT_DEFAULT
                                       if all(getattr(section, n) == defaults[n] for n in group) for name in group}
    for f in dataclasses.fields(section):
        if f.name in optional:
            continue
        if comments:
            lines.append(f"# {f.metadata['doc']}")
        lines.append(f"{f.name} = {toml_value(getattr(section, f.name))}")
    return lines


def to_toml(config: Config, *, comments: bool = True) -> str:
    """Writes ``config`` as TOML text; ``from_toml`` reads it back to an equal Config.

    With ``comments=False`` the text is canonical (used for hashes).
    """
    lines = []
    if comments:
        lines += ["# alphazero run configuration. Written once when the run was created;",
                  "# the [network] table and learner.optimizer may not change for this run.", ""]
    lines.append(f"preset = {toml_value(config.preset)}")
    for name in SECTIONS:
        lines.append("")
        lines += section_toml(getattr(config, name), comments=comments)
    return "\n".join(lines) + "\n"


# --- overrides -------------------------------------------------------------------------

def _split_override(item: str) -> tuple[str, str, str]:
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep:
        raise UserError(f"an override must look like section.key=value, got {item!r}")
    if key == "preset":
        raise UserError("the preset cannot be overridden; choose it when creating the run (--preset)")
    section, dot, name = key.partition(".")
    if not dot or not name:
        raise UserError(f"an override must look like section.key=value, got {item!r}")
    if section not in SECTIONS:
        raise unknown_section(section)
    if name not in field_hints(section):
        raise unknown_key(section, name)
    return section, name, text


def apply_overrides(config: Config, overrides: Iterable[str]) -> Config:
    """Applies ``section.key=value`` overrides, converting each value to the field's type.

    All overrides of one section are applied together, so fields checked
    against each other (learning_rates and lr_boundaries) can change at once.
    Lists are written ``a,b,c`` or ``[a, b, c]``; booleans true/false/yes/no/1/0.

    Raises:
        UserError: a malformed override, unknown section or key, or a value
            that does not convert or is out of range.
    """
    changes: dict[str, dict[str, Any]] = {}
    for item in overrides:
        section, name, text = _split_override(item)
        changes.setdefault(section, {})[name] = parse_text(f"{section}.{name}", text, field_hints(section)[name])
    sections = {name: dataclasses.replace(getattr(config, name), **values) for name, values in changes.items()}
    return dataclasses.replace(config, **sections)


def network_config_from_dict(data: dict[str, Any]) -> NetworkConfig:
    """Builds a NetworkConfig from a dict (as saved in a checkpoint).

    Raises:
        UserError: unknown keys or values of the wrong type.
    """
    if not isinstance(data, dict):
        raise UserError(f"network config must be a table, got {data!r}")
    hints = field_hints("network")
    for key in data:
        if key not in hints:
            raise unknown_key("network", key)
    return NetworkConfig(**data)
