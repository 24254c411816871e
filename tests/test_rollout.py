"""The one rollout loop: its semantics, and that its callers reproduce what their own loops produced.

``data/rollout_reference.json`` holds the outputs of the four hand-written loops that
:func:`ecrl.rollout.rollout` replaced (evaluation, dataset collection, expert demonstrations,
DAgger), recorded on fixed seeds before the change: the callers must reproduce them bit for bit
where they are numpy and MuJoCo alone (the scripted expert, collection, the replay buffer). Where a
torch network acts, its last bits depend on the CPU's kernels (on another machine the reference
policy's object ended one episode 1 mm on the other side of the success radius), so those callers
must reproduce themselves bit for bit in one process, and the reference where no float rounding
decides: the step at which each episode first succeeded, the demonstrations DAgger starts from.
"""

import hashlib
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import ecrl
from ecrl.datasets import CollectConfig, collect_dataset
from ecrl.evaluation import evaluate
from ecrl.policies.actor import EntityActorModule
from ecrl.policies.demos import collect_demos, dagger
from ecrl.rollout import ExpertPolicy, Recorder, rollout

REFERENCE = json.loads((Path(__file__).parent / "data" / "rollout_reference.json").read_text())
ROOT = Path(__file__).parents[1]


def _digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k in sorted(arrays):
        h.update(k.encode())
        h.update(np.ascontiguousarray(arrays[k]).tobytes())
    return h.hexdigest()


def _dataset_arrays(path: Path, prefix: str) -> dict[str, np.ndarray]:
    out = {}
    for f in sorted(path.glob("*.npz")):
        with np.load(f) as z:
            out.update({f"{prefix}.{f.stem}.{k}": z[k] for k in z.files})
    return out


class _Log(Recorder):
    def __init__(self) -> None:
        self.starts, self.ends, self.steps = [], [], 0

    def start(self, i, seed, obs, info) -> None:
        self.starts.append((i, seed))

    def step(self, s) -> None:
        self.steps += 1

    def end(self, i) -> None:
        self.ends.append(i)


def test_more_seeds_than_envs_run_one_episode_per_seed_in_order():
    envs = [gym.make("ecrl/Push-v0", n_objects=1) for _ in range(2)]
    log = _Log()
    rollout(envs, ExpertPolicy(), [5, 6, 7], recorder=log, stop_on_success=True)
    assert [s for _, s in log.starts] == [5, 6, 7] and len(log.ends) == 3
    assert log.starts[2][0] in (0, 1)  # the env that finished first runs the third episode


def test_a_cut_ends_an_episode_before_its_step():
    class Cut(_Log):
        def cut(self, i, obs, action) -> bool:
            return i == 1

    env = [gym.make("ecrl/Push-v0", n_objects=1) for _ in range(2)]
    log = Cut()
    rollout(env, ExpertPolicy(), [0, 1], recorder=log)
    assert log.ends[0] == 1 and log.steps == env[0].unwrapped.spec_.max_steps


def test_bad_action_shape_and_missing_restart_are_errors():
    class Bad:
        def act(self, obs):
            return np.zeros((1, 3))

    class Stateful(Bad):
        def reset(self, envs, seeds) -> None: ...

    env = gym.make("ecrl/Push-v0", n_objects=1)
    with pytest.raises(ValueError, match="shape"):
        rollout([env], Bad(), [0])
    with pytest.raises(ValueError, match="restart"):
        rollout([env], Stateful(), [0, 1])


def test_evaluation_reproduces_the_reference():
    policy = ecrl.load(ROOT / "results" / "rl_push1" / "eit" / "policy")
    for stop in (False, True):
        run = lambda stop=stop: evaluate(policy, [1, 2], episodes=3, progress=False, stop_on_success=stop, batch_size=2)  # noqa: E731
        report, again = run(), run()
        key = f"eval_stop{stop}"
        outcome = lambda report: [(r.success, r.lengths, r.returns) for r in report.results]  # noqa: E731
        assert outcome(report) == outcome(again)  # bit for bit in one process
        # The step each episode first had every object placed is the reference's on any CPU; success read at
        # the end of a non-stopping episode (and so its return) may flip where an object rests at the radius.
        assert [r.lengths for r in report.results] == [ref["lengths"] for ref in REFERENCE["eval_policy"][key]]
        if stop:
            assert [r.success for r in report.results] == [ref["success"] for ref in REFERENCE["eval_policy"][key]]


def test_collection_reproduces_the_reference(tmp_path):
    config = CollectConfig(
        n_objects=(2,), episodes=3, batch_size=2, seed=5, random_actions=0.1, progress=False, only_success=False
    )
    collect_dataset(tmp_path / "push", config)
    assert _digest(_dataset_arrays(tmp_path / "push", "collect.push")) == REFERENCE["collect_push"]
    pytest.importorskip("ogbench")
    play = CollectConfig(env="ogbench-cube", play=True, n_objects=(2,), episodes=2, batch_size=2, play_steps=60, seed=3)
    collect_dataset(tmp_path / "play", play)
    assert _digest(_dataset_arrays(tmp_path / "play", "collect.play")) == REFERENCE["collect_play"]


def test_demonstrations_replay_buffer_and_dagger_reproduce_the_reference():
    from stable_baselines3.common.buffers import DictReplayBuffer

    make = lambda: gym.make("ecrl/Push-v0", n_objects=2)  # noqa: E731
    demos = collect_demos(make, 2, seed=0, progress=False)
    arrays = {f"demos.obs.{k}": v for k, v in demos.obs.items()} | {"demos.actions": demos.actions}
    assert _digest(arrays) == REFERENCE["demos"]

    env = make()
    buf = DictReplayBuffer(2000, env.observation_space, env.action_space, n_envs=2)
    collect_demos(make, 3, seed=4, replay_buffer=buf, progress=False)  # one slot runs two episodes
    p = buf.pos
    arrays = {"buf.actions": buf.actions[:p], "buf.rewards": buf.rewards[:p], "buf.dones": buf.dones[:p]}
    arrays |= {"buf.timeouts": buf.timeouts[:p]}
    arrays |= {f"buf.obs.{k}": v[:p] for k, v in buf.observations.items()}
    arrays |= {f"buf.next.{k}": v[:p] for k, v in buf.next_observations.items()}
    assert _digest(arrays) == REFERENCE["replay"]

    def grow() -> tuple[object, str]:
        torch.manual_seed(0)
        net = EntityActorModule({"width": 8, "heads": 1}, action_dim=2, stochastic=False)
        grown = dagger(net, make, demos, iterations=1, episodes=2, steps=2, batch_size=8, progress=False, seed=3)
        arrays = {f"dagger.obs.{k}": v for k, v in grown.obs.items()} | {"dagger.actions": grown.actions}
        return grown, _digest(arrays)

    (grown, digest), (_, again) = grow(), grow()
    assert digest == again  # bit for bit in one process (the reference's digest needs the recording CPU's kernels)
    n = len(demos.actions)
    assert len(grown.actions) > n  # the actor's visited states were added ...
    np.testing.assert_array_equal(grown.actions[:n], demos.actions)  # ... after the demonstrations, unchanged
    for k, v in demos.obs.items():
        np.testing.assert_array_equal(grown.obs[k][:n], v)
