"""Training throughput of ``ecrl-bench diffusion``: windows/s of the ``ecrl-train-diffusion`` step.

The step is training's own (DDPM :func:`~ecrl.diffusion.noise.loss`, backward, gradient clipping, AdamW,
EMA update) at batch ``train_batch``, per horizon, the horizons taking turns. Windows come from a dataset
of the planning env (``DemoDataset.sample_windows``, goals relabelled in hindsight for play data, as
training does) or, without one, from a random-action rollout of the planning env. Batches are built
before timing. :mod:`ecrl.diffusion.bench` runs it with the other measurements.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

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

__all__ = ["synthetic_windows", "time_training", "training_dataset"]

_TRAIN = DiffusionTrainConfig()


def synthetic_windows(
    config: DiffusionBenchConfig, horizon: int, rng: np.random.Generator, count: int = 1
) -> list[dict[str, np.ndarray]]:
    """``count`` batches of ``train_batch`` windows of ``horizon`` steps, cut from one random-action rollout of
    the planning env with ``train_n_objects`` objects (never across a reset)."""
    env = make_env(config.planning_env, config.train_n_objects, config.task_id)
    low, high = env.action_space.low, env.action_space.high
    obs, _ = env.reset(seed=config.seed)
    rows, goals, actions, episode = [obs["observation"]], [obs["desired_goal"]], [], [0]
    for _ in range(max(2 * horizon, 64)):
        a = rng.uniform(-1, 1, size=low.shape).astype(np.float32)
        obs, _, terminated, truncated, _ = env.step(low + (a + 1) / 2 * (high - low))
        if terminated or truncated:
            obs, _ = env.reset()
        actions.append(a)
        rows.append(obs["observation"])
        goals.append(obs["desired_goal"])
        episode.append(episode[-1] + int(terminated or truncated))
    env.close()
    ep = np.array(episode)
    starts = np.flatnonzero(ep[:-horizon] == ep[horizon:])
    rows_a, goal_a, action_a = np.asarray(rows, np.float32), np.asarray(goals, np.float32), np.asarray(actions)
    batches = []
    for _ in range(count):
        t = rng.choice(starts, size=config.train_batch)[:, None] + np.arange(horizon + 1)
        batches.append(
            {
                "observation": rows_a[t],
                "action": action_a[t[:, :-1]],
                "desired_goal": goal_a[t[:, 0]],
                "valid": np.ones((config.train_batch, horizon), bool),
            }
        )
    return batches


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


def time_training(
    config: DiffusionBenchConfig, trained: DenoiserConfig | None, dataset: DemoDataset | None
) -> list[dict[str, Any]]:
    """Windows/s of the training step per horizon, the horizons taking turns: windows of ``dataset``
    (:func:`training_dataset`) or, without one, :func:`synthetic_windows`."""
    keys = ("observation", "action", "desired_goal", "mask", "goal_mask", "valid")
    rng = np.random.default_rng(config.seed)
    cases = {}
    for h in config.train_horizons:
        cfg = config.denoiser_config(h) if trained is None else DenoiserConfig(**{**asdict(trained), "horizon": h})
        torch.manual_seed(config.seed)
        model = EntityDenoiser(cfg).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=_TRAIN.lr, weight_decay=_TRAIN.weight_decay)
        ema = EMA(model, _TRAIN.ema_decay)
        raws = (
            synthetic_windows(config, h, rng, count=4)
            if dataset is None  # play data has no goals: a later state of the window's episode, as in training
            else [
                dataset.sample_windows(config.train_batch, h, rng, hindsight="future" if dataset.play else None)
                for _ in range(4)
            ]
        )
        batches = [{k: torch.as_tensor(raw[k]) for k in keys if k in raw} for raw in raws]
        n_objects = int(batches[0]["observation"].shape[2]) - 1
        generator = torch.Generator().manual_seed(config.seed)

        def step(batch, model=model, optimizer=optimizer, ema=ema, generator=generator) -> None:
            terms = loss(model, batch, generator, _TRAIN.action_weight)
            optimizer.zero_grad(set_to_none=True)
            terms.total.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            ema.update(model)

        for batch in batches[:2]:  # first steps allocate (and create the optimizer state): not timed
            step(batch)
        cases[h] = (step, batches, n_objects, [])
    for _ in range(config.repeats):
        for step, batches, _, rates in cases.values():
            start = time.perf_counter()
            for k in range(config.train_steps):
                step(batches[k % len(batches)])
            seconds = time.perf_counter() - start
            rates.append(config.train_steps * config.train_batch / seconds)
    source = "synthetic (random-action rollout)" if dataset is None else str(config.dataset)
    return [
        {
            "env": config.planning_env,
            "horizon": h,
            "batch": config.train_batch,
            "n_objects": n,
            "windows": source,
            "windows_per_s_best": reduce_rates(rates, "best"),
            "windows_per_s_median": reduce_rates(rates, "median"),
            "ms_per_step_median": 1e3 * config.train_batch / reduce_rates(rates, "median"),
        }
        for h, (_, _, n, rates) in cases.items()
    ]
