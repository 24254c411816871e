"""An interrupted collection resumes, with ``--append``, right where it stopped."""

import json

import numpy as np
import pytest

import ecrl.collect_batches as collect_batches
from ecrl.datasets import CollectConfig, DemoDataset, collect_dataset


def _config(**kwargs) -> CollectConfig:
    return CollectConfig(
        **{"n_objects": (1,), "episodes": 4, "batch_size": 2, "shard_episodes": 2, "progress": False} | kwargs
    )


def test_append_after_an_interruption_continues_where_it_stopped(tmp_path, monkeypatch):
    rollout, calls = collect_batches._rollout, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed during the second batch: seeds 2 and 3 never finish
        return rollout(*args, **kwargs)

    monkeypatch.setattr(collect_batches, "_rollout", interrupted)
    with pytest.raises(KeyboardInterrupt):
        collect_dataset(tmp_path / "cut", _config())
    monkeypatch.setattr(collect_batches, "_rollout", rollout)
    meta = json.loads((tmp_path / "cut" / "meta.json").read_text())
    assert (meta["episodes"], meta["collections"][0]["complete"], meta["collections"][0]["seeds_done"]) == (2, False, 2)

    resumed = collect_dataset(tmp_path / "cut", _config(episodes=2), append=True)
    assert resumed.seeds == (2, 4)
    meta = json.loads((tmp_path / "cut" / "meta.json").read_text())
    assert [c["seeds"] for c in meta["collections"]] == [[0, 2], [2, 4]] and meta["next_seed"] == 4
    whole = DemoDataset(collect_dataset(tmp_path / "whole", _config()).path)
    cut = DemoDataset(tmp_path / "cut")
    assert cut.seeds.tolist() == whole.seeds.tolist() == [0, 1, 2, 3]
    for key in ("observation", "action", "desired_goal", "reward"):
        np.testing.assert_array_equal(getattr(cut, key), getattr(whole, key), err_msg=key)
