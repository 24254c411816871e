"""Scripted-expert demonstrations for RL: seed a (HER) replay buffer and clone the expert.

The recipe of Nair et al. (2018), "Overcoming Exploration in RL with Demonstrations": expert
episodes go into the replay buffer (HER relabels them like any other episode), the actor is
pre-trained to imitate them, and during RL a behaviour-cloning term pulls the actor towards the
expert action. Nair et al. apply that term only where the critic rates the expert's action above the
actor's own (their Q-filter); here it applies on every demo state (``results/rl_push1`` says why).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from tqdm.auto import tqdm

from ecrl.envs import ScriptedExpert

IDLE_KEPT = 10


class _Labels:
    """(observation, expert action) pairs worth imitating, gathered from ``n`` envs side by side.

    Once every object is placed the expert idles for the rest of the episode: the first few idle
    steps are kept (how to stop) but not the long tail, which would swamp the data with zeros. Random
    steps out of a stall are executed but not kept: they are noise as labels.
    """

    def __init__(self, n: int) -> None:
        self.obs: dict[str, list[np.ndarray]] = {}
        self.actions: list[np.ndarray] = []
        self.idle = [0] * n

    def add(self, i: int, obs: dict[str, np.ndarray], action: np.ndarray, expert: ScriptedExpert) -> None:
        self.idle[i] = self.idle[i] + 1 if not action.any() else 0
        if self.idle[i] <= IDLE_KEPT and not expert.last_random:
            for k, v in obs.items():
                self.obs.setdefault(k, []).append(v)
            self.actions.append(action)

    def demos(self, episodes: int = 0, successes: int = 0) -> Demos:
        obs = {k: np.stack(v).astype(np.float32) for k, v in self.obs.items()}
        actions = np.stack(self.actions).astype(np.float32)
        return Demos(obs, actions, episodes, successes)


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
    vectorised env would fill it), with SB3's timeout convention: an episode cut by the time limit is
    marked ``TimeLimit.truncated`` so its last value is still bootstrapped.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    n = replay_buffer.n_envs if replay_buffer is not None else 1
    envs = [make_env() for _ in range(n)]
    experts = [ScriptedExpert(e, seed=seed + i) for i, e in enumerate(envs)]
    obs = [e.reset(seed=seed + 7919 * i)[0] for i, e in enumerate(envs)]
    started, finished, successes = n, 0, 0
    keys = list(obs[0])
    labels = _Labels(n)
    active = [True] * n
    bar = tqdm(total=episodes, desc="expert demos", unit="ep", disable=not progress, leave=False)
    while any(active):
        actions = np.zeros((n, 2), dtype=np.float32)
        nexts, rewards, dones, infos = [], np.zeros(n, dtype=np.float32), np.zeros(n, dtype=bool), []
        for i, (env, expert) in enumerate(zip(envs, experts, strict=True)):
            if not active[i]:
                nexts.append(obs[i])
                infos.append({})
                continue
            actions[i] = expert.act(obs[i])
            labels.add(i, obs[i], actions[i].copy(), expert)
            nxt, rewards[i], term, trunc, info = env.step(actions[i])
            dones[i] = term or trunc
            info = dict(info, **{"TimeLimit.truncated": trunc and not term})
            infos.append(info)
            nexts.append(nxt)
        if replay_buffer is not None:
            stack = lambda os: {k: np.stack([o[k] for o in os]) for k in keys}  # noqa: E731
            replay_buffer.add(stack(obs), stack(nexts), actions, rewards, dones, infos)
        for i in np.flatnonzero(dones):
            finished += 1
            successes += bool(infos[i].get("is_success", False))
            bar.update(1)
            if started < episodes:
                started += 1
                experts[i].reset()
                labels.idle[i] = 0
                nexts[i] = envs[i].reset(seed=seed + 7919 * started)[0]
            else:
                active[i] = False
        obs = nexts
    bar.close()
    for e in envs:
        e.close()
    return labels.demos(finished, successes)


def _actor_action(actor: torch.nn.Module, obs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The actor's deterministic action in ``[-1, 1]`` (the squashed mean for SAC/TQC)."""
    return actor(obs, deterministic=True) if hasattr(actor, "action_dist") else actor(obs)


def bc_errors(actor: torch.nn.Module, obs: dict[str, torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    """Per-sample squared error ``(B,)`` of the actor's deterministic action against the expert's ``target (B, A)``."""
    return ((_actor_action(actor, obs) - target) ** 2).sum(-1)


def pretrain_actor(
    actor: torch.nn.Module,
    demos: Demos,
    steps: int,
    batch_size: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
    progress: bool = True,
) -> list[float]:
    """Behaviour cloning: regress the actor's deterministic action onto the expert's (MSE). Returns losses."""
    rng = np.random.default_rng(seed)
    device = next(actor.parameters()).device
    optimizer = torch.optim.Adam(actor.parameters(), lr=lr)
    losses = []
    actor.train()
    for _ in tqdm(range(steps), desc="behaviour cloning", disable=not progress, leave=False):
        obs, target = demos.batch(rng.integers(len(demos), size=batch_size), device)
        loss = bc_errors(actor, obs, target).mean() / target.shape[-1]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


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


def dagger(
    actor: torch.nn.Module,
    make_env: Callable[[], gym.Env],
    demos: Demos,
    iterations: int,
    episodes: int,
    steps: int,
    batch_size: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
    progress: bool = True,
) -> Demos:
    """DAgger (Ross et al. 2011): run the actor, label the states it visits with the expert's action,
    add them to the demonstrations and clone again; ``iterations`` times. Returns the grown dataset.

    The actor acts (deterministically) in ``episodes`` envs side by side; the expert only labels.
    """
    device = next(actor.parameters()).device
    for it in range(iterations):
        envs = [make_env() for _ in range(episodes)]
        experts = [ScriptedExpert(e, seed=seed + 104_729 * it + i) for i, e in enumerate(envs)]
        obs = [e.reset(seed=seed + 3_000_000 + 104_729 * it + i)[0] for i, e in enumerate(envs)]
        keys = list(obs[0])
        labels = _Labels(episodes)
        horizon = envs[0].unwrapped.spec_.max_steps
        actor.eval()
        for _ in tqdm(range(horizon), desc=f"dagger {it + 1}/{iterations}", disable=not progress, leave=False):
            batch = {
                k: torch.as_tensor(np.stack([o[k] for o in obs]), dtype=torch.float32, device=device) for k in keys
            }
            with torch.no_grad():
                acts = _actor_action(actor, batch).cpu().numpy()
            for i, env in enumerate(envs):
                labels.add(i, obs[i], experts[i].act(obs[i]), experts[i])
                obs[i] = env.step(acts[i])[0]
        for e in envs:
            e.close()
        demos = demos + labels.demos()
        pretrain_actor(actor, demos, steps, batch_size, lr, seed=seed + it, progress=progress)
    return demos
