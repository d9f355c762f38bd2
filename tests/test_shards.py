"""The shard format: pinned, round-tripped, and refused when broken."""

from __future__ import annotations

import numpy as np
import pytest

from alphazero.store.shards import (
    POLICY_ARRAYS,
    SAMPLE_ARRAYS,
    SHARD_VERSION,
    VALUE_FROM_ROOT,
    ShardError,
    concatenate,
    encode_shard,
    game_ids,
    list_shards,
    read_shard,
    read_shard_games,
    shard_from_records,
    shard_name,
    value_targets,
    write_shard,
)
from mcts_ext.driver import run, uniform_evaluator
from mcts_ext.params import SearchParams
from mcts_ext.search import MultiGameSearch


@pytest.fixture(scope="module")
def records():
    search = MultiGameSearch(3, SearchParams(simulations=8, ply_limit=24), seed=3)
    finished = []
    run(search, uniform_evaluator, on_step=lambda rows: finished.extend(r for _, r in search.take_finished()))
    for record in finished:
        record["weights_step"] = 5
    return finished


def test_format_version_1_is_pinned():
    # Changing any of this breaks every shard already written: bump SHARD_VERSION instead.
    assert SHARD_VERSION == 1
    assert {name: (str(dtype), width) for name, (dtype, width) in SAMPLE_ARRAYS.items()} == {
        "planes": ("uint64", (112,)), "scalars": ("float32", (7,)), "results": ("int8", ()),
        "game": ("int32", ()), "ply": ("int16", ()), "root_values": ("float32", ()),
    }
    assert {name: str(dtype) for name, dtype in POLICY_ARRAYS.items()} == {
        "policy_indices": "int16", "policy_probs": "float32"}
    per_sample = sum(dtype.itemsize * int(np.prod(width)) for dtype, width in SAMPLE_ARRAYS.values())
    assert per_sample == 935  # bytes per sample before policy entries and compression


def test_round_trip_keeps_samples_and_game_metadata(tmp_path, records):
    shard = shard_from_records(records, {"writer": "test"})
    path = tmp_path / shard_name("test")
    write_shard(path, shard)
    back = read_shard(path)
    assert len(back) == sum(len(r["results"]) for r in records)
    for name in (*SAMPLE_ARRAYS, *POLICY_ARRAYS, "policy_offsets"):
        np.testing.assert_array_equal(getattr(back, name), getattr(shard, name))
    assert [g["moves"] for g in back.games] == [r["moves"] for r in records]
    assert all(g["weights_step"] == 5 and g["samples"] == len(r["results"]) for g, r in zip(back.games, records))
    assert back.meta["writer"] == "test" and back.meta["version"] == SHARD_VERSION


def test_dense_policy_puts_each_visit_share_at_its_index(records):
    shard = shard_from_records(records)
    dense = shard.dense_policy([0, len(shard) - 1])
    for row, sample in enumerate([0, len(shard) - 1]):
        start, end = shard.policy_offsets[sample], shard.policy_offsets[sample + 1]
        expected = np.zeros(4672, np.float32)
        expected[shard.policy_indices[start:end]] = shard.policy_probs[start:end]
        np.testing.assert_array_equal(dense[row], expected)
    np.testing.assert_allclose(dense.sum(axis=1), 1.0, atol=1e-5)


def test_concatenate_renumbers_games(records):
    one, two = shard_from_records(records[:1]), shard_from_records(records[1:])
    both = concatenate([one, two])
    assert len(both) == len(one) + len(two) and len(both.games) == len(records)
    assert both.game.max() == len(records) - 1
    np.testing.assert_array_equal(both.dense_policy(np.arange(len(both))),
                                  shard_from_records(records).dense_policy(np.arange(len(both))))
    # Stockfish labels joined stay labels: their value target is still the root values, not the results.
    labels = [shard_from_records(part, {"value_target": VALUE_FROM_ROOT}) for part in (records[:1], records[1:])]
    joined = concatenate(labels)
    np.testing.assert_array_equal(value_targets(joined), np.concatenate([value_targets(s) for s in labels]))
    with pytest.raises(ShardError, match="different value targets"):
        concatenate([labels[0], two])


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "other_version"])
def test_broken_files_raise_shard_error_naming_the_file(tmp_path, records, damage):
    data = encode_shard(shard_from_records(records))
    path = tmp_path / "broken.npz"
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not a shard at all" * 10)
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        import io

        arrays = dict(np.load(io.BytesIO(data)))
        arrays["version"] = np.array([SHARD_VERSION + 1])
        np.savez(path, **arrays)
    with pytest.raises(ShardError, match="broken.npz"):
        read_shard(path)


def test_writer_refuses_a_policy_that_does_not_sum_to_one(tmp_path, records):
    shard = shard_from_records(records)
    shard.policy_probs[:] = 0.5
    with pytest.raises(ShardError, match="does not sum to 1"):
        write_shard(tmp_path / "x.npz", shard)
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_listing_skips_temporary_files_and_sorts_by_age(tmp_path, records):
    shard = shard_from_records(records)
    names = [shard_name("a"), shard_name("b")]
    for name in names:
        write_shard(tmp_path / name, shard)
    (tmp_path / ".00000000000000000000-x-1.npz.123.abc.tmp").write_bytes(b"partial")
    assert [p.name for p in list_shards(tmp_path)] == sorted(names)


def test_game_metadata_keeps_the_calibration_and_id_keys_and_reads_alone(tmp_path, records):
    stamped = [{**record, "game_id": f"id{i}", "resign_values": {"white": -0.5, "black": None},
                "resign_consecutive": 3} for i, record in enumerate(records)]
    path = tmp_path / shard_name("test")
    write_shard(path, shard_from_records(stamped))
    games = read_shard_games(path)
    assert games == read_shard(path).games
    assert [g["game_id"] for g in games] == ["id0", "id1", "id2"]
    assert all(g["resign_values"] == {"white": -0.5, "black": None} and g["resign_threshold"] is None
               for g in games)
    assert all("move_values" not in g for g in games)  # summarised by resign_values, not stored per move
    assert game_ids(games, path.name) == ["id0", "id1", "id2"]


def test_games_of_older_shards_get_ids_from_the_file_name(tmp_path, records):
    # A version-1 shard written before games had ids.
    old = [{key: value for key, value in record.items() if key not in ("move_values", "resign_threshold")}
           for record in records]
    path = tmp_path / "00000000000000000001-old.npz"
    write_shard(path, shard_from_records(old))
    games = read_shard(path).games
    assert "game_id" not in games[0]
    assert game_ids(games, path.name) == [f"{path.name}#{i}" for i in range(3)]
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"garbage")
    with pytest.raises(ShardError, match="broken.npz"):
        read_shard_games(broken)


def test_each_samples_network_step_round_trips_and_is_checked(tmp_path, records):
    # Self-play writes the learner step that searched each sample (issue 48); older shards lack the array.
    with_steps = [{**record, "weights_steps": np.where(record["plies_of_samples"] < 4, 3, 5).astype(np.int32)}
                  for record in records]
    path = tmp_path / shard_name("test")
    write_shard(path, shard_from_records(with_steps))
    back = read_shard(path)
    np.testing.assert_array_equal(back.weights_steps,
                                  np.concatenate([record["weights_steps"] for record in with_steps]))
    assert back.weights_steps.dtype == np.int32
    joined = concatenate([back, shard_from_records(with_steps[:1])])
    assert len(joined.weights_steps) == len(joined)
    assert concatenate([back, shard_from_records(records)]).weights_steps is None  # one part lacks them
    assert shard_from_records(records).weights_steps is None
    broken = shard_from_records(with_steps)
    with pytest.raises(ShardError, match="weights_steps is int32"):
        write_shard(tmp_path / "x.npz", type(broken)(**{**vars(broken), "weights_steps": broken.weights_steps[1:]}))
