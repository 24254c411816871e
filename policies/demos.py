"""Scripted-expert demonstrations for RL: seed a (HER) replay buffer and clone the expert.

The recipe of Nair et al. (2018), "Overcoming Exploration in RL with Demonstrations": expert
episodes go into the replay buffer (HER relabels them like any other episode), the actor is
pre-trained to imitate them, and during RL a behaviour-cloning term pulls the actor towards the
expert action. Nair et al. apply that term only where the critic rates the expert's action above the
actor's own (their Q-filter); here it applies on every demo state (``results/rl_push1`` says why).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import HerReplayBuffer
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from tqdm.auto import tqdm

from ecrl.checkpoint import load_optimizer_state, optimizer_state
from ecrl.distributed import World, average_gradients, broadcast_parameters, rank_seed, split_batch
from ecrl.rollout import ExpertPolicy, Recorder, Step, rollout

IDLE_KEPT = 10
LOSSES_KEPT = 100
"""Behaviour-cloning losses a :class:`BCPosition` keeps (the BC loss a run reports is their mean)."""
BC_BATCH = 256
"""Demonstrations per behaviour-cloning step (over all processes of a data-parallel run)."""


class _Labels(Recorder):
    """(observation, expert action) pairs worth imitating, recorded during a :func:`ecrl.rollout.rollout`.

    ``expert`` labels every step: its action is the label (for :func:`collect_demos` it is the
    acting policy; for :func:`dagger` it only labels the states the actor visits). Once every
    object is placed the expert idles for the rest of the episode: the first few idle steps are
    kept (how to stop) but not the long tail, which would swamp the data with zeros. Random steps
    out of a stall are not kept: they are noise as labels.
    """

    def __init__(self, n: int, expert: ExpertPolicy, labels: Callable[[], np.ndarray] | None = None) -> None:
        self.obs: dict[str, list[np.ndarray]] = {}
        self.actions: list[np.ndarray] = []
        self.idle = [0] * n
        self.expert, self.labels = expert, labels
        self.episodes = self.successes = 0

    def start(self, i, seed, obs, info) -> None:
        self.idle[i] = 0

    def step(self, s: Step) -> None:
        i, expert = s.env, self.expert.experts[s.env]
        action = s.action if self.labels is None else self.labels()[i]
        self.idle[i] = self.idle[i] + 1 if not action.any() else 0
        if self.idle[i] <= IDLE_KEPT and not expert.last_random:
            for k, v in s.obs.items():
                self.obs.setdefault(k, []).append(v)
            self.actions.append(action.copy())
        if s.terminated or s.truncated:
            self.episodes += 1
            self.successes += bool(s.info.get("is_success", False))

    def demos(self) -> Demos:
        obs = {k: np.stack(v).astype(np.float32) for k, v in self.obs.items()}
        actions = np.stack(self.actions).astype(np.float32)
        return Demos(obs, actions, self.episodes, self.successes)


class _ReplayFeed(Recorder):
    """Adds every lockstep step of ``n`` envs to an SB3 replay buffer, one env per buffer slot (as a
    vectorised env fills it), with SB3's timeout convention: an episode cut by the time limit is
    marked ``TimeLimit.truncated`` so its last value is still bootstrapped. A slot whose env has
    no episode left adds a no-op row (its last state, a zero action, no reward)."""

    def __init__(self, replay_buffer: ReplayBuffer, action_dim: int) -> None:
        n = replay_buffer.n_envs
        self.buffer, self.last, self.rows = replay_buffer, [{}] * n, [None] * n
        self.action_dim = action_dim

    def start(self, i, seed, obs, info) -> None:
        self.last[i] = obs

    def step(self, s: Step) -> None:
        info = dict(s.info, **{"TimeLimit.truncated": s.truncated and not s.terminated})
        self.rows[s.env] = (s.obs, s.next_obs, s.action, s.reward, s.terminated or s.truncated, info)
        self.last[s.env] = s.next_obs

    def tick(self, stepped: np.ndarray) -> None:
        rows = [
            self.rows[i]
            if stepped[i]
            else (self.last[i], self.last[i], np.zeros(self.action_dim, np.float32), 0.0, False, {})
            for i in range(len(stepped))
        ]
        obs, nexts, actions, rewards, dones, infos = zip(*rows, strict=True)
        stack = lambda os: {k: np.stack([o[k] for o in os]) for k in obs[0]}  # noqa: E731
        self.buffer.add(
            stack(obs), stack(nexts), np.stack(actions), np.array(rewards, np.float32), np.array(dones), list(infos)
        )


class _Both(Recorder):
    """Two recorders hearing the same rollout."""

    def __init__(self, *recorders: Recorder) -> None:
        self.recorders = recorders

    def start(self, *args) -> None:
        for r in self.recorders:
            r.start(*args)

    def step(self, s: Step) -> None:
        for r in self.recorders:
            r.step(s)

    def tick(self, stepped: np.ndarray) -> None:
        for r in self.recorders:
            r.tick(stepped)


@dataclass
class Demos:
    """Expert transitions (without the long idle tail after success, see ``IDLE_KEPT``): ``obs``
    (dict of ``(T, …)`` arrays) and ``actions (T, A)`` in ``[-1, 1]``."""

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    episodes: int
    successes: int

    def __len__(self) -> int:
        return len(self.actions)

    def __add__(self, other: Demos) -> Demos:
        """Both datasets' transitions (this one's episode counts)."""
        return Demos(
            obs={k: np.concatenate([v, other.obs[k]]) for k, v in self.obs.items()},
            actions=np.concatenate([self.actions, other.actions]),
            episodes=self.episodes,
            successes=self.successes,
        )

    def save(self, path: Path) -> None:
        """Write every transition to ``path`` (``.npz``, no pickle)."""
        arrays = {f"obs.{k}": v for k, v in self.obs.items()}
        arrays.update(actions=self.actions, counts=np.array([self.episodes, self.successes]))
        with open(path, "wb") as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path: Path) -> Demos:
        """The demonstrations :meth:`save` wrote to ``path``."""
        with np.load(path, allow_pickle=False) as data:
            obs = {k.removeprefix("obs."): data[k] for k in data.files if k.startswith("obs.")}
            episodes, successes = (int(c) for c in data["counts"])
            return cls(obs, data["actions"], episodes, successes)

    def batch(self, idx: np.ndarray, device: torch.device | str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """``(obs, actions)`` tensors of the transitions ``idx``."""
        obs = {k: torch.as_tensor(v[idx], device=device) for k, v in self.obs.items()}
        return obs, torch.as_tensor(self.actions[idx], device=device)


def collect_demos(
    make_env: Callable[[], gym.Env],
    episodes: int,
    seed: int,
    replay_buffer: ReplayBuffer | None = None,
    progress: bool = True,
) -> Demos:
    """Run the scripted expert for ``episodes`` episodes; optionally add every transition to ``replay_buffer``.

    The buffer gets ``replay_buffer.n_envs`` episodes side by side (one env per buffer slot, as a
    vectorised env would fill it; see :class:`_ReplayFeed`). The first episode of env slot ``i``
    resets with seed ``seed + 7919 i``, the ``k``-th episode after those with ``seed + 7919 (n + k)``; the expert in env slot ``i`` is seeded with ``seed + i``.

    A HER buffer needs ``episodes`` to be a multiple of its ``n_envs`` (push episodes all run to the
    horizon, so every slot then ends its last episode at the same step). Otherwise a slot whose env
    has no episode left gets filler rows (its last state, a zero action) that end no episode: the
    slot's first RL episode would be joined to them, and HER would relabel them with goals reached
    in that other scene.

    Raises:
        ValueError: ``episodes < 1``, or not a multiple of the ``n_envs`` of a HER ``replay_buffer``.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    n = replay_buffer.n_envs if replay_buffer is not None else 1
    if isinstance(replay_buffer, HerReplayBuffer) and episodes % n:
        raise ValueError(
            f"a HER buffer of {n} envs takes whole episodes in every env slot: episodes ({episodes}) must be a multiple of {n}"
        )
    envs = [make_env() for _ in range(n)]
    expert = ExpertPolicy(seeds=[seed + i for i in range(n)])
    labels = _Labels(n, expert)
    recorder = (
        labels if replay_buffer is None else _Both(labels, _ReplayFeed(replay_buffer, envs[0].action_space.shape[0]))
    )
    with tqdm(desc="expert demos", unit="step", disable=not progress, leave=False) as bar:
        seeds = [seed + 7919 * k for k in (*range(n), *range(n + 1, episodes + 1))][:episodes]
        rollout(envs, expert, seeds, recorder=recorder, bar=bar)
    for e in envs:
        e.close()
    return labels.demos()


class _Actor:
    """A torch actor as a batch policy: its deterministic action, no gradients."""

    def __init__(self, actor: torch.nn.Module) -> None:
        self.actor, self.device = actor, next(actor.parameters()).device

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        batch = {k: torch.as_tensor(v, dtype=torch.float32, device=self.device) for k, v in obs.items()}
        with torch.no_grad():
            return _actor_action(self.actor, batch).cpu().numpy()


class _Labelled:
    """``policy`` acts; ``expert`` labels the same observations (its actions in ``labels``)."""

    def __init__(self, policy: _Actor, expert: ExpertPolicy) -> None:
        self.policy, self.expert = policy, expert

    def reset(self, envs: Sequence[gym.Env], seeds: Sequence[int]) -> None:
        self.expert.reset(envs, seeds)

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        actions = self.policy.act(obs)
        self.labels = self.expert.act(obs)
        return actions


def _actor_action(actor: torch.nn.Module, obs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The actor's deterministic action in ``[-1, 1]`` (the squashed mean for SAC/TQC)."""
    return actor(obs, deterministic=True) if hasattr(actor, "action_dist") else actor(obs)


def bc_errors(actor: torch.nn.Module, obs: dict[str, torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    """Per-sample squared error ``(B,)`` of the actor's deterministic action against the expert's ``target (B, A)``."""
    return ((_actor_action(actor, obs) - target) ** 2).sum(-1)


@dataclass
class BCPosition:
    """Where a behaviour-cloning pass stands, to save it and continue it later: the steps done, the
    sampler's state (numpy's bit-generator state), the optimizer's (:func:`ecrl.checkpoint.optimizer_state`
    of the prefix ``"bc"``: tensors, and the JSON-able rest) and the last ``LOSSES_KEPT`` losses."""

    step: int
    rng: dict[str, Any]
    optimizer: tuple[dict[str, torch.Tensor], dict[str, Any]]
    losses: list[float]


def pretrain_actor(
    actor: torch.nn.Module,
    demos: Demos,
    steps: int,
    batch_size: int = BC_BATCH,
    lr: float = 1e-3,
    seed: int = 0,
    progress: bool = True,
    world: World | None = None,
    start: BCPosition | None = None,
    checkpoint: Callable[[BCPosition], None] | None = None,
    checkpoint_every: int = 0,
    on_step: Callable[[int, torch.Tensor], None] | None = None,
) -> list[float]:
    """Behaviour cloning: regress the actor's deterministic action onto the expert's (MSE). Returns the
    losses (this process's, one per step).

    In a process of a data-parallel run (``world``, under ``torchrun``): ``batch_size`` is the global
    batch, this process draws its share from its own sampler (seeded with ``seed`` on rank 0, as a
    single process) and the gradients are averaged over the processes before each step. The actor is
    not wrapped in DDP: it goes on training in one process (RL on rank 0) after imitation.

    Every ``checkpoint_every`` steps (0: never) ``checkpoint`` gets the pass's :class:`BCPosition`; a pass
    given it as ``start`` (with the actor's weights of that moment) continues as if never stopped; its
    losses then begin with the position's last ``LOSSES_KEPT``. ``on_step(step, loss)`` is called after each
    step with the step's number (from 0) and its loss, still a tensor on the device (for logging).
    """
    world = world or World()
    rng = np.random.default_rng(rank_seed(seed, world.rank))
    per_process = split_batch(batch_size, world)
    device = next(actor.parameters()).device
    broadcast_parameters(actor)
    optimizer = torch.optim.Adam(actor.parameters(), lr=lr)
    first, losses = 0, []
    if start is not None:
        first, rng.bit_generator.state = start.step, start.rng
        load_optimizer_state(optimizer, *start.optimizer, "bc")
        losses = [torch.tensor(x) for x in start.losses]
    actor.train()
    bar = tqdm(
        range(first, steps), desc="behaviour cloning", disable=not progress, leave=False, initial=first, total=steps
    )
    for step in bar:
        if checkpoint is not None and checkpoint_every and step > first and step % checkpoint_every == 0:
            kept = torch.stack(losses[-LOSSES_KEPT:]).tolist()
            checkpoint(BCPosition(step, rng.bit_generator.state, optimizer_state(optimizer, "bc"), kept))
        obs, target = demos.batch(rng.integers(len(demos), size=per_process), device)
        loss = bc_errors(actor, obs, target).mean() / target.shape[-1]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        average_gradients(actor.parameters())
        optimizer.step()
        losses.append(loss.detach())  # read once at the end: a step does not wait for the device
        if on_step is not None:
            on_step(step, losses[-1])
    return torch.stack(losses).tolist() if losses else []


class DemoBCCallback(BaseCallback):
    """During RL, every ``every`` env steps: one behaviour-cloning step of the actor on demos.

    The actor is pulled towards the expert's action on every demo state (a plain BC regulariser);
    ``weight`` scales the loss. Logs ``train/bc_loss``.
    """

    def __init__(
        self,
        demos: Demos,
        weight: float = 1.0,
        every: int = 2,
        batch_size: int = 128,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.demos, self.weight, self.every, self.batch_size = demos, weight, every, batch_size
        self._rng = np.random.default_rng(seed)

    def _on_step(self) -> bool:
        model = self.model
        if self.weight <= 0 or model.num_timesteps < model.learning_starts or self.n_calls % self.every:
            return True
        actor = model.policy.actor
        if not next(actor.parameters()).requires_grad:  # frozen (FreezeActorCallback)
            return True
        obs, target = self.demos.batch(self._rng.integers(len(self.demos), size=self.batch_size), model.device)
        actor.train()
        per_sample = bc_errors(actor, obs, target)
        loss = self.weight * per_sample.mean()
        actor.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        actor.optimizer.step()
        self.logger.record_mean("train/bc_loss", per_sample.mean().item())
        return True


class FreezeActorCallback(BaseCallback):
    """Keeps the actor fixed for the first ``steps`` env steps of training, so that the critic first
    learns the value of the (behaviour-cloned) actor instead of dragging an untrained critic's
    gradient through it."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps
        self._frozen = False

    def _set(self, frozen: bool) -> None:
        for p in self.model.policy.actor.parameters():
            p.requires_grad_(not frozen)
        self._frozen = frozen

    def _on_training_start(self) -> None:
        if self.model.num_timesteps < self.steps:
            self._set(True)

    def _on_step(self) -> bool:
        if self._frozen and self.model.num_timesteps >= self.steps:
            self._set(False)
        return True


def dagger_round(
    actor: torch.nn.Module,
    make_env: Callable[[], gym.Env],
    demos: Demos,
    iteration: int,
    episodes: int,
    seed: int = 0,
    progress: bool = True,
    of: int | None = None,
) -> Demos:
    """DAgger's rollouts of round ``iteration`` (from 0; ``of`` rounds, for the progress bar): the actor acts
    (deterministically) in ``episodes`` envs side by side, the expert labels the states it visits. Returns
    ``demos`` grown by those labels."""
    envs = [make_env() for _ in range(episodes)]
    expert = ExpertPolicy(seeds=[seed + 104_729 * iteration + i for i in range(episodes)])
    policy = _Labelled(_Actor(actor), expert)
    labels = _Labels(episodes, expert, lambda: policy.labels)
    actor.eval()
    with tqdm(desc=f"dagger {iteration + 1}/{of or iteration + 1}", disable=not progress, leave=False) as bar:
        seeds = [seed + 3_000_000 + 104_729 * iteration + i for i in range(episodes)]
        rollout(envs, policy, seeds, recorder=labels, bar=bar)
    for e in envs:
        e.close()
    return demos + labels.demos()


def dagger(
    actor: torch.nn.Module,
    make_env: Callable[[], gym.Env],
    demos: Demos,
    iterations: int,
    episodes: int,
    steps: int,
    batch_size: int = BC_BATCH,
    lr: float = 1e-3,
    seed: int = 0,
    progress: bool = True,
    world: World | None = None,
) -> Demos:
    """DAgger (Ross et al. 2011): run the actor, label the states it visits with the expert's action,
    add them to the demonstrations and clone again; ``iterations`` times. Returns the grown dataset.

    The actor acts (deterministically) in ``episodes`` envs side by side; the expert only labels
    (:func:`dagger_round`). In a data-parallel run (``world``) every process runs the same episodes
    with the same actor, so all grow the same dataset, and the cloning is data-parallel
    (:func:`pretrain_actor`).
    """
    for it in range(iterations):
        demos = dagger_round(actor, make_env, demos, it, episodes, seed, progress, of=iterations)
        pretrain_actor(actor, demos, steps, batch_size, lr, seed=seed + it, progress=progress, world=world)
    return demos
