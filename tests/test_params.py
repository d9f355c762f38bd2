"""Each search setting has one definition (mcts_ext.params): the C struct, the run's config and the modes agree."""

from __future__ import annotations

import dataclasses

import pytest

from alphazero.config import SearchConfig, apply_overrides, to_toml
from alphazero.errors import UserError
from alphazero.presets import get_preset
from alphazero.search import ANALYSIS, SELFPLAY, UCI, search_params
from mcts_ext import search as search_module
from mcts_ext.params import SearchParams, SearchSettings, settings_of
from mcts_ext.search import MultiGameSearch


def _flat(options: dict, prefix: str = "") -> dict[str, object]:
    """{'puct': {'c_init': 1.25}} as {'puct.c_init': 1.25}."""
    flat: dict[str, object] = {}
    for key, value in options.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


# Values other than the defaults for every setting, within their ranges, that PUCT self-play accepts
# (the algorithm aside: Gumbel would refuse some of the others).
CHANGED = dict(algorithm="puct", simulations=77, c_init=2.5, c_base=1000.0, dirichlet_alpha=0.5, noise_weight=0.5,
               fpu_mode="absolute", fpu_value=-0.5, policy_temperature=2.0, temperature_plies=7, temperature=0.5,
               temperature_endgame=0.25, temperature_halflife=12.0, temperature_value_cutoff=0.2,
               leaves_per_game=3, virtual_loss=0.5, tree_reuse=True, ply_limit=99, resign_consecutive=5,
               resign_disabled_fraction=0.5, playout_cap_fraction=0.5, playout_cap_simulations=9, forced_playouts=2.0,
               gumbel_considered=4, gumbel_scale=0.5, gumbel_c_visit=10.0, gumbel_c_scale=0.5,
               gumbel_q_normalisation="node", gumbel_unvisited="action_value", autoplay=False, add_noise=False,
               record=False, visits_per_leaf=2.0, resign_threshold=-0.75, solver=True, tree_memory_mb=64.0)


def test_the_c_struct_has_a_value_for_each_field_and_a_field_for_each_value():
    search = MultiGameSearch(1, SearchParams(simulations=8))
    assert set(_flat(search.c_options)) == set(_flat(SearchParams().c_options()))


def test_every_setting_reaches_its_c_field():
    assert set(CHANGED) == {f.name for f in dataclasses.fields(SearchParams)}  # a new setting joins CHANGED
    params = SearchParams(**CHANGED)
    wanted, got = _flat(params.c_options()), _flat(MultiGameSearch(1, params).c_options)
    assert got == pytest.approx(wanted)
    defaults = _flat(SearchParams().c_options())
    for name, spec in settings_of(SearchParams).items():
        if spec.c is not None and name != "algorithm":  # each setting alone moves its own field
            assert _flat(SearchParams(**{name: CHANGED[name]}).c_options())[spec.c] != defaults[spec.c], name
    assert (got["resign"], got["resign_threshold"]) == (True, -0.75)
    assert MultiGameSearch(1, SearchParams(algorithm="gumbel")).c_options["algorithm"] == 1


def test_choices_fill_the_c_enums_in_their_order():
    enums = {"algorithm": search_module.ALGORITHMS, "fpu_mode": search_module.FPU_MODES,
             "gumbel_q_normalisation": search_module.Q_NORMALISATIONS,
             "gumbel_unvisited": search_module.GUMBEL_UNVISITED}
    for name, spec in settings_of(SearchParams).items():
        if spec.choices:
            assert enums[name] == {choice: index for index, choice in enumerate(spec.choices)}, name


def test_the_run_config_is_the_settings_plus_the_calibration_and_shares_their_help():
    config_fields = {f.name: f for f in dataclasses.fields(SearchConfig)}
    settings = {f.name: f for f in dataclasses.fields(SearchSettings)}
    assert set(config_fields) == set(settings) | set(SearchConfig.CALIBRATION_FIELDS)
    for name, f in settings.items():
        assert config_fields[name].default == f.default and config_fields[name].metadata["doc"] in to_toml(
            get_preset("tiny"))


@pytest.mark.parametrize("name", [name for name, spec in settings_of(SearchSettings).items()
                                  if spec.minimum is not None or spec.above is not None])
def test_the_config_refuses_what_the_setting_refuses(name: str):
    spec = settings_of(SearchSettings)[name]
    low = spec.minimum if spec.minimum is not None else spec.above
    assert low is not None
    bad = low - 1 if spec.minimum is not None else low
    with pytest.raises(ValueError, match=name):
        SearchParams(**{name: bad})
    with pytest.raises(UserError, match=f"search.{name}"):
        apply_overrides(get_preset("small"), [f"search.{name}={bad}"])


def test_self_play_takes_every_setting_and_analysis_its_constants():
    changed = {name: CHANGED[name] for name in settings_of(SearchSettings)}
    config = dataclasses.replace(SearchConfig(), **changed)
    selfplay = search_params(config, SELFPLAY, resign_threshold=-0.5)
    assert {name: getattr(selfplay, name) for name in changed} == changed
    assert selfplay.resign_threshold == -0.5
    for mode in (ANALYSIS, UCI):
        analysis = search_params(config, mode)
        for name, spec in settings_of(SearchSettings).items():
            if spec.analysis:
                assert getattr(analysis, name) == changed[name], name
        assert (analysis.autoplay, analysis.add_noise, analysis.gumbel_scale, analysis.ply_limit) == (False, False,
                                                                                                    0.0, 0)
        # The agents and the engine play the best move: no temperature, whatever self-play's schedule.
        assert (analysis.temperature, analysis.temperature_endgame) == (0.0, 0.0)


def test_none_is_refused_where_a_setting_needs_a_value():
    with pytest.raises(ValueError, match="ply_limit must be given a value"):
        SearchParams(ply_limit=None)  # type: ignore[arg-type]  # the mistake under test
    assert SearchParams(ply_limit=0).c_options()["ply_limit"] == 0  # no limit


def test_the_playout_caps_cheap_moves_may_not_search_more_than_the_full_ones():
    with pytest.raises(ValueError, match=r"playout_cap_simulations \(9\) must be at most simulations \(8\)"):
        SearchParams(simulations=8, playout_cap_fraction=0.25, playout_cap_simulations=9)
    assert SearchParams(simulations=8, playout_cap_fraction=0.25, playout_cap_simulations=8).simulations == 8
    assert SearchParams(simulations=8, playout_cap_simulations=100).playout_cap_fraction == 0  # off: not read
    # tiny's cap searches 8 on the cheap moves: a run asking fewer simulations is told what to change.
    with pytest.raises(UserError, match=r"set playout_cap_fraction=0"):
        apply_overrides(get_preset("tiny"), ["search.simulations=4"])
    assert apply_overrides(get_preset("tiny"), ["search.simulations=4", "search.playout_cap_fraction=0"])
