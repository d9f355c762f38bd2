"""The presets a run starts from, and reading a saved config: the preset it names, then its own values.

- ``tiny``: a CPU default. 1 block x 32 filters, Gumbel AlphaZero with 32
  simulations on a quarter of the moves and 8 on the rest (playout cap
  randomization), a reply-policy head and short-term value targets in
  training, games capped at 256 plies, 32 at once per core; the learner
  starts on the first shard.
- ``small``: 6 blocks x 64 filters, 200 simulations: a real run on one GPU.
- ``alphazero``: the values of Silver et al. (2018): 20 blocks x 256 filters,
  800 simulations, batch 4096, learning rate 0.2 dropping tenfold at 100k,
  300k and 500k steps.
- Both PUCT presets (and ``cf-6m``, small's search) keep a move temperature
  over the whole game in self-play, lc0's and KataGo's schedule where
  AlphaZero plays the most visited move after 30 plies.
- ``cf-tiny``: tiny's search and self-play with a 2-layer Chessformer
  (``network.kind = "chessformer"``, embedding 48, 2 heads), trained with NAdam
  and the auxiliary soft-policy and q targets: the transformer on a CPU.
- ``cf-6m``: small's search and self-play with the Chessformer paper's CF-6M
  (8 layers, embedding 256, 8 heads, feed-forward 256): a run on one GPU.

``INIT_DEFAULTS`` is what ``alphazero train --init`` changes in a preset for a
run that starts from trained weights. The schema, TOML writing and overrides
are alphazero.config's.

Example::

    config = apply_overrides(get_preset("tiny"), ["search.simulations=100"])
    assert from_toml(to_toml(config)) == config
"""

from __future__ import annotations

import dataclasses
import tomllib
from typing import Any

from alphazero.config import (
    DEFAULT_PRESET,
    SECTIONS,
    Config,
    EvalConfig,
    LearnerConfig,
    NetworkConfig,
    SearchConfig,
    SelfPlayConfig,
    field_hints,
    unknown_key,
    unknown_section,
)
from alphazero.errors import UserError

# --- the presets --------------------------------------------------------------------

# Self-play's move temperature over the whole game, on in every PUCT preset (mcts_ext.params.SearchSettings'
# defaults are AlphaZero's rule: T = 1 for 30 plies, then the most visited move, with which PUCT self-play from
# zero fell into repetition draws: EXPERIMENTS.md, "Forced playouts at PUCT from zero"). The opening keeps
# AlphaZero's 30 plies at T = 1; then the temperature decays with KataGo's half-life, 19
# (lightvector/KataGo cpp/configs/training/selfplay1.cfg, chosenMoveTemperatureHalflife: counted in turns,
# one player's move as a ply is; KataGo shrinks it on boards smaller than 19x19, whose games are shorter, but
# chess games run 80 to 250 plies, as 19x19 Go's do), to 0.6, the endgame temperature of a from-zero lc0 run
# at up to 800 visits (hans-ekbrand/lczero-training run.sh: --temperature=0.9 --tempdecay-delay-moves=20
# --tempdecay-moves=60 --temp-cutoff-move=40 --temp-endgame=0.60; that author's runs at 10,000 visits end at
# 0.30, KataGo's Go runs at 0.15). lc0's value cutoff (TempValueCutoff, src/search/classic/params.cc; off by default
# there) keeps a sampled move within 10 points of win probability of the best move's, so that the endgame
# temperature does not throw won games: the 10 is ours, unmeasured, looser than the 1 point of lc0's
# reproduction of AlphaZero's match sampling (lc0 v0.19.1 notes) because a Q of few visits is noisy.
_WHOLE_GAME_TEMPERATURE: dict[str, Any] = dict(temperature_endgame=0.6, temperature_halflife=19.0,
                                               temperature_value_cutoff=0.1)


def _tiny() -> Config:
    # Sized for a 2-core laptop: games that end within the first minutes, so that the learner starts early.
    return Config(
        preset="tiny",
        # The reply head (the opponent's next search target as a second policy, training only) is one of
        # issue 79's three techniques chosen together by games from zero (see the learner below).
        # One block, not two: from zero, 1 x 32 beat 2 x 32 in two pairings of an hour each (EXPERIMENTS.md,
        # "One block of 32 against tiny's 2 x 32, an hour each from zero, a second pairing").
        network=NetworkConfig(blocks=1, filters=32, policy_filters=32, policy_kernel=1,
                              value_filters=8, value_hidden=64, reply_policy_head=True),
        # Gumbel AlphaZero: chosen by games between 30-minute runs against PUCT with 16 and 64 (EXPERIMENTS.md,
        # "Gumbel AlphaZero with 16 simulations against PUCT with 64"). Playout cap randomization:
        # a quarter of the moves search 32 simulations and are policy targets, the rest 8 and are not
        # (EXPERIMENTS.md, "The protocol's table at `tiny`" and "The new tiny
        # defaults' hour from zero against the old").
        search=SearchConfig(algorithm="gumbel", simulations=32, playout_cap_fraction=0.25,
                            playout_cap_simulations=8, ply_limit=256),
        # gpu_games_per_actor is not measured: tiny is a CPU preset. Its device stays 'auto': without
        # --gpus that is the CPU (for_gpus), with --gpus the GPUs asked for.
        selfplay=SelfPlayConfig(games_per_actor=32, shard_games=16, weights_poll_seconds=10.0,
                                gpu_games_per_actor=256),
        # max_sample_reuse 2: 4 memorised results, 1 learnt no better than 2 (EXPERIMENTS.md, "Sample reuse and
        # the calibrated resignation").
        learner=LearnerConfig(batch_size=256, lr_boundaries=(10_000, 30_000, 50_000), training_steps=70_000,
                              window_positions=100_000, min_window_positions=2_000, max_sample_reuse=2.0,
                              checkpoint_every=200, keep_checkpoints=5, keep_every_steps=5_000, log_every=20,
                              validation_positions=5_000, validate_every=200,
                              # Issue 79's short-term value target (a quarter of it the root value 6 plies
                              # ahead) and the reply head's loss, with the playout cap above; doubling either
                              # won nothing by games (EXPERIMENTS.md, "The reply head's and the
                              # short-term value's weights doubled, from zero at tiny").
                              value_target_short_term_weight=0.25, value_target_short_term_plies=6,
                              reply_policy_weight=0.15),
        eval=EvalConfig(games=20, every_steps=400),
    )


def _small() -> Config:
    return Config(
        preset="small",
        network=NetworkConfig(blocks=6, filters=64, policy_filters=64, value_filters=16, value_hidden=128),
        # PUCT: Gumbel's advantage was measured at 16 simulations (see _tiny); at 200 and 800 the two are
        # unmeasured here, and the paper found them close at high budgets.
        search=SearchConfig(simulations=200, **_WHOLE_GAME_TEMPERATURE),
        # On a GPU: the knee of games in flight, the fewest within 90% of the best evaluations/s (issue 48's
        # rule): 512 games with 4 leaves each make lanes of 1024 as 2048 games with one did, each game moving
        # every 2.4 s instead of 7.6 (EXPERIMENTS.md, "The first network trained on a GPU, one H200").
        selfplay=SelfPlayConfig(games_per_actor=64, shard_games=32, gpu_games_per_actor=512,
                                gpu_leaves_per_game=4),
        # The window starts with what the first games bring (two batches) and grows as a power law of the
        # positions seen, as KataGo's shuffler does (LearnerConfig.window_size).
        learner=LearnerConfig(batch_size=1024, lr_boundaries=(40_000, 120_000, 200_000), training_steps=280_000,
                              window_positions=1_000_000, min_window_positions=2_048, window_exponent=0.75,
                              max_sample_reuse=2.0, checkpoint_every=500, keep_every_steps=10_000,
                              validation_positions=20_000, validate_every=500),
        eval=EvalConfig(games=40, every_steps=2_000),
    )


def _alphazero() -> Config:
    # The dataclass defaults are AlphaZero's values. The window is the exception:
    # AlphaZero sampled from its last 1M games (about 100M positions, 100 GB in
    # compact form); 20M positions keep the last 200k games in 20 GB.
    # Inference 'local' (each actor runs the network), 1024 games per actor and CUDA graphs, not
    # compilation (15 actors compiling their buckets take too long to start), as measured on an H100 and
    # an H200 (EXPERIMENTS.md, "GPU: one H100" and "The GPU path on a GPU").
    # Its search is AlphaZero's but for the move temperature, kept over the whole game (_WHOLE_GAME_TEMPERATURE).
    return Config(preset="alphazero", search=SearchConfig(**_WHOLE_GAME_TEMPERATURE),
                  selfplay=SelfPlayConfig(inference="local", games_per_actor=128, gpu_games_per_actor=1024,
                                          cuda_forward="graphs"))


# The Chessformer presets train with NAdam (beta 0.9/0.98, epsilon 1e-7, decoupled
# weight decay) after a linear warm-up, at rates that do not scale with the batch,
# and give the auxiliary soft-policy and q targets a weight.
_CHESSFORMER_LEARNER: dict[str, Any] = dict(optimizer="nadam", learning_rates=(1e-3, 3e-4, 1e-4, 3e-5), scale_lr=False,
                            momentum=0.9, beta2=0.98, epsilon=1e-7, weight_decay=0.01,
                            soft_policy_loss_weight=1.0, q_loss_weight=1.0)


def _cf_tiny() -> Config:
    # The tiny preset's search, self-play and schedule with a 2-layer Chessformer of about its FLOPs per
    # evaluation (`bench network` counts them). On a CPU the attention's 64 x 64 matrices cost more than
    # their FLOPs say, so two heads, not four (EXPERIMENTS.md, "Chessformer: cf-tiny against resnets of its
    # FLOPs and of 4x").
    tiny = _tiny()
    return dataclasses.replace(
        tiny,
        preset="cf-tiny",
        # The reply head as tiny's: its loss weight comes with tiny's learner.
        network=NetworkConfig(kind="chessformer", layers=2, embedding=48, heads=2, ffn=48, policy_filters=48,
                              value_head="wdl", value_filters=8, value_hidden=64,
                              reply_policy_head=tiny.network.reply_policy_head),
        learner=dataclasses.replace(tiny.learner, warmup_steps=250, **_CHESSFORMER_LEARNER),
    )


def _cf_6m() -> Config:
    # The paper's CF-6M body (8 layers, embedding 256, 8 heads, feed-forward 256)
    # with the small preset's search, self-play and schedule: a run on one GPU.
    small = _small()
    return dataclasses.replace(
        small,
        preset="cf-6m",
        network=NetworkConfig(kind="chessformer", layers=8, embedding=256, heads=8, ffn=256, policy_filters=256,
                              value_head="wdl", value_filters=32, value_hidden=128),
        learner=dataclasses.replace(small.learner, warmup_steps=1000, **_CHESSFORMER_LEARNER),
    )


# What `alphazero train --init` changes in the preset for a run that starts from trained weights: self-play
# from the built-in network with the tiny preset as it is loses every game to its start within a few hundred
# learner steps (EXPERIMENTS.md, "Self-play from the built-in network, and why it lost strength",
# and "Self-play that climbs"). The user's --set overrides win over these.
INIT_DEFAULTS: tuple[str, ...] = (
    # Batch-norm statistics re-estimated on self-play positions alone cost strength, every weight unchanged.
    "learner.freeze_batch_norm=true",
    # The results of short self-play games are a poorer value target than the search's root value for a
    # network that already knows chess: learning results collapsed its value.
    "learner.value_target_q_weight=1.0",
    # All of the value target is then the search's root value: none left for the short-term target's share.
    "learner.value_target_short_term_weight=0",
    # Gumbel's improved policy with 16 simulations picked worse moves than the network's own prior; PUCT's
    # visits with 64 picked better.
    "search.algorithm=puct",
    "search.simulations=64",
    # Learning PUCT-64's visits sharpens the prior and that alone cost strength; the search softens the
    # prior it reads, in self-play and in evaluation alike.
    "search.policy_temperature=2.0",
)

_PRESETS = {"tiny": _tiny, "small": _small, "alphazero": _alphazero, "cf-tiny": _cf_tiny, "cf-6m": _cf_6m}
PRESET_NAMES: tuple[str, ...] = tuple(_PRESETS)



def get_preset(name: str) -> Config:
    """Gets the preset config called ``name`` (one of PRESET_NAMES).

    Raises:
        UserError: unknown name; the message lists the presets.
    """
    if name not in _PRESETS:
        raise UserError(f"unknown preset {name!r}; the presets are: {', '.join(PRESET_NAMES)}")
    return _PRESETS[name]()



# --- reading a saved config ---------------------------------------------------------

# Fields a preset set after they were added (tiny's, by issue 79; the PUCT presets' move temperature): a saved
# config that leaves one out was written before the field existed and its run played with the field's default
# (off), whatever the preset says now. A run of the old tiny thus resumes with its own network, targets and
# budget, and one of the old small with AlphaZero's 30-ply temperature.
_DEFAULT_WHEN_LEFT_OUT: dict[str, tuple[str, ...]] = {
    "network": ("reply_policy_head",),
    "search": ("playout_cap_fraction", "playout_cap_simulations", "temperature_endgame", "temperature_halflife",
               "temperature_value_cutoff"),
    "learner": ("reply_policy_weight", "value_target_short_term_weight"),
}


def config_from_dict(data: dict[str, Any]) -> Config:
    """Builds a Config from nested dicts (parsed TOML); keys left out take the named preset's values,
    but _DEFAULT_WHEN_LEFT_OUT's take their fields' defaults in a table the dict has.

    Raises:
        UserError: unknown preset, section or key, or a value of the wrong type.
    """
    preset = data.get("preset", DEFAULT_PRESET)
    if not isinstance(preset, str):
        raise UserError(f"preset must be a string, got {preset!r}")
    config = get_preset(preset)
    sections = {}
    for name, table in data.items():
        if name == "preset":
            continue
        if name not in SECTIONS:
            raise unknown_section(name)
        if not isinstance(table, dict):
            raise UserError(f"config section {name!r} must be a table ([{name}]), got {table!r}")
        hints = field_hints(name)
        for key in table:
            if key not in hints:
                raise unknown_key(name, key)
        defaults = {f.name: f.default for f in dataclasses.fields(getattr(config, name))}
        written_before = {key: defaults[key] for key in _DEFAULT_WHEN_LEFT_OUT.get(name, ()) if key not in table}
        sections[name] = dataclasses.replace(getattr(config, name), **{**written_before, **table})
    return dataclasses.replace(config, **sections)


def from_toml(text: str) -> Config:
    """Reads a Config from TOML text (as written by ``to_toml``).

    Raises:
        UserError: the text is not TOML, or names an unknown preset, section or
            key, or holds a value of the wrong type; the message names the key.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"config is not valid TOML: {error}") from None
    return config_from_dict(data)


