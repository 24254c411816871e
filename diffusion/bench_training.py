"""Training throughput of ``ecrl-bench diffusion``: windows/s of the ``ecrl-train-diffusion`` step.

The step is training's own (DDPM :func:`~ecrl.diffusion.noise.loss`, backward, gradient clipping, AdamW,
EMA update) at batch ``train_batch``, per horizon, the horizons taking turns. Windows come from a dataset
of the planning env (``DemoDataset.sample_windows``, goals relabelled in hindsight for play data, as
training does) or, without one, from a random-action rollout of the planning env. Batches are built
before timing. :mod:`ecrl.diffusion.bench` runs it with the other measurements; its pieces (the rollout,
the windows cut from it, the step, the loop that times steps in turns) also time the planner from pixels
against the state planner (:mod:`ecrl.diffusion.bench_pixels`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypeVar

import gymnasium as gym
import numpy as np
import torch

from ecrl.diffusion.bench_env import action_dim, make_env
from ecrl.diffusion.denoiser import DenoiserConfig, EntityDenoiser
from ecrl.diffusion.ema import EMA
from ecrl.diffusion.noise import loss
from ecrl.diffusion.train import DiffusionTrainConfig
from ecrl.timing import reduce_rates

if TYPE_CHECKING:
    from ecrl.datasets import DemoDataset
    from ecrl.diffusion.bench import DiffusionBenchConfig

__all__ = [
    "as_tensors",
    "cut_windows",
    "random_rollout",
    "rate_stats",
    "synthetic_windows",
    "time_training",
    "training_dataset",
    "training_rates",
    "training_step",
]

_TRAIN = DiffusionTrainConfig()


def random_rollout(env: gym.Env, steps: int, seed: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``steps`` uniformly random actions in ``env`` from ``reset(seed)``.

    Returns:
        Every observation key stacked over the ``T + 1 = steps + 1`` states (``observation (T + 1, N, F)``,
        ``desired_goal (T + 1, N, G)``, ``pixels (T + 1, V, P, P, 3)`` uint8 where the env renders them; floats
        as float32), ``action (T, A)`` in ``[-1, 1]`` and ``episode (T + 1,)``: the resets before each state
        (the state after a reset replaces the terminal one).
    """
    low, high = env.action_space.low, env.action_space.high
    obs, _ = env.reset(seed=seed)
    states, actions, episode = [obs], [], [0]
    for _ in range(steps):
        a = rng.uniform(-1, 1, size=low.shape).astype(np.float32)
        obs, _, terminated, truncated, _ = env.step(low + (a + 1) / 2 * (high - low))
        if terminated or truncated:
            obs, _ = env.reset()
        actions.append(a)
        states.append(obs)
        episode.append(episode[-1] + int(terminated or truncated))
    stacked = {k: np.stack([s[k] for s in states]) for k in states[0]}
    stacked = {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in stacked.items()}
    return stacked | {"action": np.asarray(actions), "episode": np.asarray(episode)}


def cut_windows(
    rollout: Mapping[str, np.ndarray], horizon: int, batch: int, rng: np.random.Generator, count: int = 1
) -> list[dict[str, np.ndarray]]:
    """``count`` batches of ``batch`` windows of ``horizon`` steps cut from a :func:`random_rollout` (never across
    a reset): ``observation (B, H + 1, …)``, ``action (B, H, A)``, ``desired_goal`` of the window's first state
    and an all-True ``valid (B, H)``.

    Raises:
        ValueError: no episode of the rollout is ``horizon`` steps long.
    """
    episode = rollout["episode"]
    starts = np.flatnonzero(episode[:-horizon] == episode[horizon:])
    if not len(starts):
        raise ValueError(
            f"windows of {horizon} steps: the rollout of {len(episode) - 1} steps has no episode that long"
        )
    batches = []
    for _ in range(count):
        t = rng.choice(starts, size=batch)[:, None] + np.arange(horizon + 1)
        batches.append(
            {
                "observation": rollout["observation"][t],
                "action": rollout["action"][t[:, :-1]],
                "desired_goal": rollout["desired_goal"][t[:, 0]],
                "valid": np.ones((batch, horizon), bool),
            }
        )
    return batches


def synthetic_windows(
    config: DiffusionBenchConfig, horizon: int, rng: np.random.Generator, count: int = 1
) -> list[dict[str, np.ndarray]]:
    """``count`` batches of ``train_batch`` windows of ``horizon`` steps, cut from one random-action rollout of
    the planning env with ``train_n_objects`` objects (never across a reset)."""
    env = make_env(config.planning_env, config.train_n_objects, config.task_id)
    rollout = random_rollout(env, max(2 * horizon, 64), config.seed, rng)
    env.close()
    return cut_windows(rollout, horizon, config.train_batch, rng, count)


def training_dataset(config: DiffusionBenchConfig) -> DemoDataset:
    """``config.dataset`` as a ``DemoDataset``, checked to hold episodes of the planning env.

    Raises:
        ValueError: it holds no episodes, or was collected in another env (other rows and action width).
    """
    from ecrl.datasets import DemoDataset

    dataset = DemoDataset(config.dataset)
    if len(dataset) == 0:
        raise ValueError(f"dataset {config.dataset} holds no episodes")
    collections = dataset.meta.get("collections") or [{}]
    env = collections[0].get("config", {}).get("env", "push")
    if env != config.planning_env or dataset.action_dim != action_dim(config.planning_env):
        raise ValueError(
            f"dataset {config.dataset} was collected in env {env} ({dataset.action_dim}-d actions), the benchmark "
            f"plans in {config.planning_env}: pass a dataset of that env (ecrl-collect --env {config.planning_env}) "
            "or leave --dataset out"
        )
    return dataset


def training_step(config: DenoiserConfig, seed: int) -> Callable[[Mapping[str, torch.Tensor]], None]:
    """The ``ecrl-train-diffusion`` step (DDPM loss, backward, gradient clipping, AdamW, EMA update) of a fresh
    denoiser of ``config``, its weights and noise seeded by ``seed``."""
    torch.manual_seed(seed)
    model = EntityDenoiser(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=_TRAIN.lr, weight_decay=_TRAIN.weight_decay)
    ema = EMA(model, _TRAIN.ema_decay)
    generator = torch.Generator().manual_seed(seed)

    def step(batch: Mapping[str, torch.Tensor]) -> None:
        terms = loss(model, batch, generator, _TRAIN.action_weight)
        optimizer.zero_grad(set_to_none=True)
        terms.total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        ema.update(model)

    return step


def as_tensors(windows: list[dict[str, np.ndarray]]) -> list[dict[str, torch.Tensor]]:
    """Batches of windows as the training step's tensors (the keys the loss reads)."""
    keys = ("observation", "action", "desired_goal", "mask", "goal_mask", "valid")
    return [{k: torch.as_tensor(raw[k]) for k in keys if k in raw} for raw in windows]


Case = TypeVar("Case")


def training_rates(
    cases: Mapping[Case, tuple[Callable[[Mapping[str, torch.Tensor]], None], list[dict[str, torch.Tensor]]]],
    repeats: int,
    steps: int,
) -> dict[Case, list[float]]:
    """Windows/s of each case's training step (:func:`training_step`, its batches) per repeat, the cases taking
    turns within every repeat, ``steps`` steps each; two untimed steps of every case come first (they allocate
    and create the optimizer state)."""
    for step, batches in cases.values():
        for batch in batches[:2]:
            step(batch)
    rates: dict[Case, list[float]] = {case: [] for case in cases}
    for _ in range(repeats):
        for case, (step, batches) in cases.items():
            start = time.perf_counter()
            for k in range(steps):
                step(batches[k % len(batches)])
            rates[case].append(steps * len(batches[0]["action"]) / (time.perf_counter() - start))
    return rates


def rate_stats(rates: list[float], batch: int) -> dict[str, float]:
    """Best and median windows/s of the repeats, and the median's ms per step of ``batch`` windows."""
    median = reduce_rates(rates, "median")
    return {
        "windows_per_s_best": reduce_rates(rates, "best"),
        "windows_per_s_median": median,
        "ms_per_step_median": 1e3 * batch / median,
    }


def time_training(
    config: DiffusionBenchConfig, trained: DenoiserConfig | None, dataset: DemoDataset | None
) -> list[dict[str, Any]]:
    """Windows/s of the training step per horizon, the horizons taking turns: windows of ``dataset``
    (:func:`training_dataset`) or, without one, :func:`synthetic_windows`."""
    rng = np.random.default_rng(config.seed)
    cases, n_objects = {}, {}
    for h in config.train_horizons:
        cfg = config.denoiser_config(h) if trained is None else DenoiserConfig(**{**asdict(trained), "horizon": h})
        step = training_step(cfg, config.seed)
        raws = (
            synthetic_windows(config, h, rng, count=4)
            if dataset is None  # play data has no goals: a later state of the window's episode, as in training
            else [
                dataset.sample_windows(config.train_batch, h, rng, hindsight="future" if dataset.play else None)
                for _ in range(4)
            ]
        )
        cases[h] = (step, as_tensors(raws))
        n_objects[h] = int(raws[0]["observation"].shape[2]) - 1
    rates = training_rates(cases, config.repeats, config.train_steps)
    source = "synthetic (random-action rollout)" if dataset is None else str(config.dataset)
    return [
        {
            "env": config.planning_env,
            "horizon": h,
            "batch": config.train_batch,
            "n_objects": n_objects[h],
            "windows": source,
            **rate_stats(rates[h], config.train_batch),
        }
        for h in cases
    ]
