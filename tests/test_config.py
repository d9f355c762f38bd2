"""Config: presets, TOML round trip, overrides, fixed fields and hashes."""

from __future__ import annotations

import dataclasses

import pytest

from alphazero.config import (
    REFERENCE_BATCH_SIZE,
    Config,
    NetworkConfig,
    SearchConfig,
    apply_overrides,
    network_config_from_dict,
    to_toml,
)
from alphazero.config_compat import architecture_hash, config_hash, incompatible_fields
from alphazero.errors import UserError
from alphazero.presets import INIT_DEFAULTS, PRESET_NAMES, from_toml, get_preset
from tests.helpers import OLD_TINY_HASH, old_tiny


def test_presets_exist_and_differ_as_documented() -> None:
    assert PRESET_NAMES == ("tiny", "small", "alphazero", "cf-tiny", "cf-6m")
    tiny, small, alphazero = (get_preset(name) for name in ("tiny", "small", "alphazero"))
    assert all(config.network.kind == "resnet" for config in (tiny, small, alphazero))
    assert (tiny.network.blocks, tiny.network.filters) == (1, 32)
    assert (small.network.blocks, small.network.filters) == (6, 64)
    assert (alphazero.network.blocks, alphazero.network.filters) == (20, 256)
    assert tiny.search.simulations < small.search.simulations < alphazero.search.simulations == 800
    assert tiny.selfplay.games_per_actor == 32
    assert tiny.learner.batch_size < small.learner.batch_size < alphazero.learner.batch_size == 4096
    assert all(get_preset(name).preset == name for name in PRESET_NAMES)


def test_alphazero_preset_has_alphazero_values() -> None:
    config = get_preset("alphazero")
    search = config.search
    assert (search.c_init, search.c_base, search.dirichlet_alpha, search.noise_weight) == (1.25, 19652.0, 0.3, 0.25)
    assert (search.temperature_plies, search.ply_limit, search.resign_disabled_fraction) == (30, 512, 0.1)
    learner = config.learner
    assert learner.learning_rates == (0.2, 0.02, 0.002, 0.0002)
    assert (learner.momentum, learner.weight_decay) == (0.9, 1e-4)
    assert learner.learning_rate(0) == 0.2 and learner.learning_rate(100_000) == 0.02
    assert learner.learning_rate(500_000) == pytest.approx(0.0002)


def test_learning_rate_scales_with_batch_size() -> None:
    tiny = get_preset("tiny").learner
    assert tiny.learning_rate(0) == pytest.approx(0.2 * tiny.batch_size / REFERENCE_BATCH_SIZE)
    assert tiny.learning_rate(tiny.lr_boundaries[0]) == pytest.approx(0.02 * tiny.batch_size / REFERENCE_BATCH_SIZE)
    unscaled = apply_overrides(get_preset("tiny"), ["learner.scale_lr=false"]).learner
    assert unscaled.learning_rate(0) == 0.2


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(UserError, match="tiny, small, alphazero, cf-tiny, cf-6m"):
        get_preset("huge")


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_toml_round_trip_is_identity(name: str) -> None:
    config = get_preset(name)
    assert from_toml(to_toml(config)) == config
    assert from_toml(to_toml(config, comments=False)) == config


def test_toml_round_trip_of_awkward_values() -> None:
    config = apply_overrides(get_preset("tiny"), [
        'selfplay.device=cuda:1', "learner.weight_decay=1e-7", "learner.learning_rates=0.1,0.01",
        "learner.lr_boundaries=[7]", "eval.stockfish_elos=[]", "search.c_base=1e10",
    ])
    assert from_toml(to_toml(config)) == config
    odd = dataclasses.replace(config, selfplay=dataclasses.replace(config.selfplay, device='a "b"\\\n\x7f\u00e9'))
    assert from_toml(to_toml(odd)) == odd


def test_toml_leaves_out_keys_take_the_preset_values() -> None:
    config = from_toml('preset = "small"\n[search]\nsimulations = 50\n')
    assert config.network == get_preset("small").network
    assert config.search.simulations == 50


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('preset = "tiny"\n[search]\nsimulatons = 5\n', "search.simulatons"),
        ('preset = "tiny"\n[serach]\nsimulations = 5\n', "serach"),
        ('preset = "tiny"\n[search]\nsimulations = "many"\n', "search.simulations must be an integer"),
        ('preset = "tiny"\n[search]\ntree_reuse = 1\n', "search.tree_reuse must be true or false"),
        ('preset = "tiny"\n[learner]\nlearning_rates = [0.1, "x"]\n', r"learner.learning_rates\[1\]"),
        ('preset = "tiny"\n[network]\nvalue_head = "both"\n', "network.value_head must be one of"),
        ('preset = "nope"\n', "unknown preset"),
        ("this is = not toml [", "not valid TOML"),
    ],
)
def test_bad_toml_names_the_key(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        from_toml(text)


def test_overrides_convert_types() -> None:
    config = apply_overrides(get_preset("small"), [
        "search.simulations=100", "network.blocks=4", "search.c_init=2", "search.tree_reuse=yes",
        "network.value_head=wdl", "learner.learning_rates=[0.1, 0.01]", "learner.lr_boundaries=500",
    ])
    assert config.search.simulations == 100 and config.network.blocks == 4
    assert config.search.c_init == 2.0 and isinstance(config.search.c_init, float)
    assert config.search.tree_reuse is True
    assert config.network.value_head == "wdl"
    assert config.learner.learning_rates == (0.1, 0.01) and config.learner.lr_boundaries == (500,)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("search.simulation=5", "did you mean search.simulations"),
        ("searching.simulations=5", "unknown config section"),
        ("search.simulations=lots", "search.simulations must be an integer"),
        ("search.simulations=0", "at least 1"),
        ("search.noise_weight=1.5", r"\[0, 1\]"),
        ("search.tree_reuse=maybe", "true or false"),
        ("simulations=5", "section.key=value"),
        ("search.simulations", "section.key=value"),
        ("preset=small", "preset cannot be overridden"),
        ("learner.learning_rates=0.1", "one more entry"),
    ],
)
def test_bad_overrides_raise(override: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        apply_overrides(get_preset("tiny"), [override])


def test_incompatible_fields_are_named() -> None:
    saved = get_preset("tiny")
    assert incompatible_fields(saved, saved) == []
    free = apply_overrides(saved, ["search.simulations=10", "learner.batch_size=64", "selfplay.actors=3"])
    assert incompatible_fields(saved, free) == []
    changed = apply_overrides(saved, ["network.blocks=3", "network.value_head=wdl", "learner.optimizer=adam"])
    assert incompatible_fields(saved, changed) == ["network.blocks", "network.value_head", "learner.optimizer"]
    assert "network.filters" in incompatible_fields(saved, get_preset("small"))


def test_hashes_are_stable_and_sensitive() -> None:
    tiny = get_preset("tiny")
    assert config_hash(tiny) == config_hash(get_preset("tiny"))
    assert len(config_hash(tiny)) == 64
    assert config_hash(tiny) != config_hash(apply_overrides(tiny, ["search.simulations=65"]))
    assert architecture_hash(tiny) == architecture_hash(apply_overrides(tiny, ["search.simulations=65"]))
    assert architecture_hash(tiny) == architecture_hash(tiny.network)
    assert architecture_hash(tiny) != architecture_hash(get_preset("small"))


def test_configs_are_frozen_and_validate_on_construction() -> None:
    config = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.search.simulations = 3  # type: ignore[misc]
    with pytest.raises(UserError, match="network.blocks"):
        NetworkConfig(blocks="2")  # type: ignore[arg-type]
    assert SearchConfig(c_init=1).c_init == 1.0


def test_every_field_is_documented() -> None:
    text = to_toml(get_preset("tiny"))
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if " = " in line and not line.startswith(("#", "preset")):
            assert lines[i - 1].startswith("# "), line


def test_gpus_bring_the_presets_gpu_batch_sizes() -> None:
    from alphazero.selfplay_devices import for_gpus

    small, alphazero = get_preset("small"), get_preset("alphazero")
    assert for_gpus(small, 0).selfplay == dataclasses.replace(small.selfplay, device="cpu")  # the rest as it is
    assert for_gpus(small, 1).selfplay.games_per_actor == small.selfplay.gpu_games_per_actor == 512
    # The knee on an H200 (EXPERIMENTS.md, "The first network trained on a GPU, one H200"): four leaves a game
    # on a GPU, one on the CPU, and one for Gumbel, whose Sequential Halving takes one.
    assert for_gpus(small, 1).search.leaves_per_game == 4 and for_gpus(small, 0).search.leaves_per_game == 1
    gumbel = apply_overrides(small, ["search.algorithm=gumbel"])
    assert for_gpus(gumbel, 1).search.leaves_per_game == 1
    assert for_gpus(apply_overrides(small, ["selfplay.gpu_leaves_per_game=0"]), 1).search.leaves_per_game == 1
    assert for_gpus(alphazero, 0.5).selfplay.games_per_actor == 1024
    # CUDA graphs for both: 15 actors compiling the 20x256 net at start ran past the bench's limit on an H200
    # (EXPERIMENTS.md, "The GPU path on a GPU").
    assert alphazero.selfplay.inference == "local" and alphazero.selfplay.cuda_forward == "graphs"
    assert small.selfplay.cuda_forward == "graphs" and small.selfplay.overlap == "auto"
    unset = apply_overrides(small, ["selfplay.gpu_games_per_actor=0"])
    assert for_gpus(unset, 1).selfplay.games_per_actor == small.selfplay.games_per_actor
    with pytest.raises(UserError, match="selfplay.cuda_forward"):
        apply_overrides(small, ["selfplay.cuda_forward=fast"])


@pytest.mark.parametrize("preset", ["tiny", "cf-tiny", "small"])
def test_gpus_put_self_play_on_them_whatever_the_preset(preset: str) -> None:
    # Issue 23, defect 1: tiny and cf-tiny said selfplay.device = "cpu", so --gpus reserved GPUs that
    # actors then left idle, searching on the CPU.
    from alphazero.selfplay_devices import for_gpus

    assert for_gpus(get_preset(preset), 1).selfplay.device == "cuda"
    # An actor sees only its own GPU, as cuda:0 (issue 69: cuda:1 is refused, tests/test_cuda_devices.py).
    assert for_gpus(apply_overrides(get_preset(preset), ["selfplay.device=cuda:0"]), 2).selfplay.device == "cuda"
    with pytest.raises(UserError, match=r"--gpus 1 reserves GPUs for self-play, but selfplay.device is 'cpu'"):
        for_gpus(apply_overrides(get_preset(preset), ["selfplay.device=cpu"]), 1)


@pytest.mark.parametrize("preset", ["small", "alphazero", "cf-6m", "tiny"])
def test_without_gpus_self_play_runs_on_the_cpu_whatever_the_machine_has(preset: str) -> None:
    # Issue 23, defect 2: with device "auto" every actor of --gpus 0 opened a CUDA context on GPU 0.
    from alphazero.selfplay_devices import for_gpus

    assert for_gpus(get_preset(preset), 0).selfplay.device == "cpu"
    with pytest.raises(UserError, match=r"selfplay.device is 'cuda', but self-play has no GPUs: pass --gpus"):
        for_gpus(apply_overrides(get_preset(preset), ["selfplay.device=cuda"]), 0)


def test_parity_keys_are_checked() -> None:
    small = get_preset("small")
    assert (small.selfplay.parity_check, small.selfplay.parity_share) == ("auto", 0.01)
    for bad, message in (("selfplay.parity_check=sometimes", "selfplay.parity_check must be one of"),
                         ("selfplay.parity_share=1.5", r"selfplay.parity_share must lie in \[0, 1\]"),
                         ("selfplay.parity_atol=-1", "selfplay.parity_atol must be at least 0")):
        with pytest.raises(UserError, match=message):
            apply_overrides(small, [bad])


def test_a_run_saved_before_the_gpu_keys_still_loads() -> None:
    text = to_toml(get_preset("small"))
    old = "\n".join(line for line in text.splitlines()
                    if not line.startswith(("gpu_", "overlap", "cuda_forward")))
    assert from_toml(old) == get_preset("small")


# --- network kinds and the Chessformer presets -----------------------------------------


def test_chessformer_presets_have_their_architecture_and_optimizer() -> None:
    cf_tiny, cf_6m = get_preset("cf-tiny"), get_preset("cf-6m")
    assert (cf_6m.network.kind, cf_6m.network.layers, cf_6m.network.embedding) == ("chessformer", 8, 256)
    assert (cf_6m.network.heads, cf_6m.network.ffn, cf_6m.network.value_head) == (8, 256, "wdl")
    assert cf_tiny.network.kind == "chessformer" and cf_tiny.network.layers < cf_6m.network.layers
    for config in (cf_tiny, cf_6m):
        learner = config.learner
        assert (learner.optimizer, learner.momentum, learner.beta2, learner.epsilon) == ("nadam", 0.9, 0.98, 1e-7)
        assert learner.warmup_steps > 0 and not learner.scale_lr
        assert learner.soft_policy_loss_weight > 0 and learner.q_loss_weight > 0
    assert cf_tiny.search == get_preset("tiny").search and cf_6m.search == get_preset("small").search
    for name in ("tiny", "small", "alphazero"):
        learner = get_preset(name).learner
        assert learner.soft_policy_loss_weight == 0 == learner.q_loss_weight and learner.warmup_steps == 0


def test_a_tiny_run_written_before_issue_79s_defaults_resumes_as_it_played() -> None:
    # Its config.toml has none of the keys the new tiny turned on: the run keeps its network (its
    # checkpoints' hash), its targets and its budget, not the preset's new values.
    added = ("reply_policy_head", "reply_policy_weight", "value_target_short_term_weight",
             "value_target_short_term_plies", "playout_cap_fraction", "playout_cap_simulations")
    old_text = "\n".join(line for line in to_toml(old_tiny()).splitlines() if line.split(" = ")[0] not in added)
    assert from_toml(old_text) == old_tiny() != get_preset("tiny")
    assert architecture_hash(from_toml(old_text)) == OLD_TINY_HASH
    tiny = get_preset("tiny")
    assert tiny.network.reply_policy_head and tiny.search.playout_cap_fraction > 0
    assert from_toml(to_toml(tiny)) == tiny  # a run of the new tiny writes every key and resumes as itself


def test_the_init_defaults_apply_to_every_preset() -> None:
    for name in PRESET_NAMES:
        config = apply_overrides(get_preset(name), INIT_DEFAULTS)
        assert config.learner.value_target_q_weight + config.learner.value_target_short_term_weight <= 1.0


def test_a_config_written_before_network_kind_loads_as_resnet() -> None:
    new_keys = ("kind", "layers", "embedding", "heads", "ffn")
    old_text = "\n".join(line for line in to_toml(get_preset("tiny"), comments=False).splitlines()
                         if line.split(" = ")[0] not in new_keys and not line.startswith(
                             ("warmup_steps", "beta2", "epsilon", "soft_policy", "q_loss")))
    assert "kind" not in old_text
    assert from_toml(old_text) == get_preset("tiny")
    saved_network = {"blocks": 2, "filters": 32, "policy_filters": 32, "policy_kernel": 1, "value_head": "scalar",
                     "value_filters": 8, "value_hidden": 64}  # a checkpoint's network entry before kinds
    assert network_config_from_dict(saved_network) == old_tiny().network


def test_architecture_hash_covers_the_transformer_fields() -> None:
    cf = get_preset("cf-tiny")
    hashes = {architecture_hash(apply_overrides(cf, [override])) for override in (
        "network.layers=3", "network.embedding=32", "network.heads=4", "network.ffn=32", "network.kind=resnet")}
    assert len(hashes) == 5 and architecture_hash(cf) not in hashes
    assert incompatible_fields(cf, apply_overrides(cf, ["network.heads=4"])) == ["network.heads"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("network.kind=vit", "network.kind must be one of 'resnet', 'chessformer'"),
        ("network.heads=5", r"network.embedding \(48\) must be a multiple of network.heads \(5\)"),
        ("learner.optimizer=rmsprop", "learner.optimizer must be one of 'sgd', 'adam', 'adamw', 'nadam'"),
        ("learner.beta2=1", "below 1"),
        ("learner.soft_policy_temperature=0.5", "at least 1"),
    ],
)
def test_bad_chessformer_overrides_raise(override: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        apply_overrides(get_preset("cf-tiny"), [override])


def test_learning_rate_warms_up_linearly() -> None:
    learner = apply_overrides(get_preset("cf-tiny"), ["learner.warmup_steps=4"]).learner
    peak = learner.learning_rates[0]
    assert [learner.learning_rate(step) for step in range(5)] == pytest.approx([peak / 4, peak / 2, 3 * peak / 4,
                                                                               peak, peak])
    assert learner.learning_rate(learner.lr_boundaries[0]) == learner.learning_rates[1]
