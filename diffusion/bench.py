"""How fast the diffusion planner plans and trains on a CPU: the measurement of ``ecrl-bench diffusion``.

:func:`measure` takes a :class:`DiffusionBenchConfig` and returns the numbers; the CLI
(:mod:`ecrl.scripts.bench_diffusion`) checks the target and writes the tables, plot and README.

Three measurements:

* **Planning latency per env step.** A :class:`~ecrl.diffusion.planner.DiffusionPlanner` behind the
  library's policy API (:func:`ecrl.diffusion.train.planner_policy`) acts in ``ecrl/Push-v0`` with N
  objects, batch 1, for every (horizon, sampling steps, replan every) setting and N: each
  ``policy.act(obs)`` and each ``env.step`` is timed on its own. A call that samples a plan makes
  ``sampling_steps`` denoiser calls; the next ``replan_every - 1`` calls only read the plan. The
  per-step cost is amortised over ``replan_every``: (median planning call + (replan_every - 1) x
  median plan-reading call) / replan_every. Random weights by default (the cost does not depend on
  them); ``checkpoint`` times a trained planner instead (settings with another horizon are skipped).
* **One denoiser call** (batch 1, under ``torch.inference_mode()``) per N and horizon.
* **Training throughput.** Windows/s of the training step of ``ecrl-train-diffusion`` (DDPM
  :func:`~ecrl.diffusion.noise.loss`, backward, gradient clipping, AdamW, EMA update) at batch
  ``train_batch``: windows from ``dataset`` (``DemoDataset.sample_windows``) or, without one,
  windows of a random-action rollout of ``ecrl/Push-v0`` with ``train_n_objects`` objects. Batches
  are built before timing.

The machine is shared and noisy, so a reference runs in the same loops: one batch-1 call of the EIT
actor (the ``entity_actor`` builder, ``NetConfig`` defaults, random weights; built through the
checkpoint registry, :func:`ecrl.checkpoint.build`, as this package does not import ``ecrl.policies``)
on a ``ref_n``-object observation after every timed env step; latencies are also reported as multiples
of its median. Settings, N and horizons take turns within every repeat. Garbage collection is off
while a loop is timed.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from ecrl.checkpoint import build as build_registered
from ecrl.diffusion.denoiser import DenoiserConfig, EntityDenoiser, goal_features, split_rows
from ecrl.diffusion.ema import EMA
from ecrl.diffusion.noise import loss
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.diffusion.train import DiffusionTrainConfig, planner_policy
from ecrl.envs import MAX_OBJECTS  # importing ecrl.envs registers ecrl/Push-v0
from ecrl.envs.layout import ENTITY_PRESENT, GOAL_PRESENT
from ecrl.policy import Policy, load
from ecrl.timing import call_ms, gc_paused, latency_stats, reduce_rates, rollout_observations

__all__ = ["DiffusionBenchConfig", "measure"]

_TRAIN = DiffusionTrainConfig()


@dataclass(frozen=True)
class DiffusionBenchConfig:
    """Diffusion planner speed: planning latency per env step, one denoiser call, training windows/s."""

    n_objects: tuple[int, ...] = (3, 12)
    """Objects in the planning env (ecrl/Push-v0); the target uses the first."""
    settings: tuple[tuple[int, int, int], ...] = ((4, 5, 1), (8, 5, 1), (16, 10, 2), (16, 5, 4))
    """(horizon, sampling_steps, replan_every) per timed planner; the target uses the first."""
    steps: int = 400
    """Timed env steps per (N, setting), in `repeats` turns."""
    warmup_steps: int = 4
    """Untimed env steps per (N, setting) before timing."""
    denoiser_calls: int = 200
    """Timed batch-1 denoiser calls per (N, horizon), in `repeats` turns."""
    repeats: int = 10
    """Turns: within each, every (N, setting) runs `steps / repeats` steps, then the next."""
    width: int = _TRAIN.denoiser.width
    """Denoiser token width (default: ecrl-train-diffusion's; a checkpoint brings its own)."""
    heads: int = _TRAIN.denoiser.heads
    """Denoiser attention heads."""
    blocks: int = _TRAIN.denoiser.blocks
    """Denoiser transformer blocks."""
    mlp_ratio: int = _TRAIN.denoiser.mlp_ratio
    """Hidden width of the blocks' MLPs, as a multiple of `width`."""
    diffusion_steps: int = _TRAIN.denoiser.diffusion_steps
    """Noise levels of the DDPM (bounds sampling_steps)."""
    guidance: float = _TRAIN.guidance
    """Classifier-free guidance weight (not 1: two denoiser passes per call, in one batch); a checkpoint keeps its own."""
    checkpoint: Path | None = None
    """A trained planner (`ecrl.load`-able) to time instead of random weights; only settings with its horizon run."""
    ref_n: int = 12
    """Objects in the observation of the reference EIT actor call."""
    train_horizons: tuple[int, ...] = (4, 8, 16)
    """Horizons of the training-throughput benchmark."""
    train_batch: int = _TRAIN.batch_size
    """Windows per training step."""
    train_n_objects: int = 3
    """Objects in the synthetic training windows (ignored with --dataset)."""
    train_steps: int = 10
    """Timed training steps per horizon and repeat."""
    dataset: Path | None = None
    """Demonstration dataset (ecrl-collect) to draw training windows from (default: synthetic windows)."""
    max_ms: float = 20.0
    """Target: amortised planning ms per env step of the first setting at the first N at most this."""
    threads: int | None = None
    """torch CPU threads (default: torch's own choice, usually the number of cores)."""
    reduce: Literal["best", "median"] = "best"
    """Which repeat the training windows/s plot uses: the fastest (noise only adds time) or the median."""
    seed: int = 0
    """Seed of the weights, the rollouts and the sampler."""
    strict: bool = False
    """Exit with status 1 when a target fails."""
    out: Path = Path("results/bench_diffusion")
    """Output directory (created if missing): bench.json, README.md, speed.png."""

    def __post_init__(self) -> None:
        if not self.n_objects or not all(1 <= n <= MAX_OBJECTS for n in (*self.n_objects, self.ref_n)):
            raise ValueError(f"n_objects and ref_n must be in 1 … {MAX_OBJECTS}, got {self.n_objects}, {self.ref_n}")
        if not 1 <= self.train_n_objects <= MAX_OBJECTS:
            raise ValueError(f"train_n_objects must be in 1 … {MAX_OBJECTS}, got {self.train_n_objects}")
        sizes = (self.steps, self.repeats, self.denoiser_calls, self.train_batch, self.train_steps)
        if min(sizes) < 1 or self.warmup_steps < 0 or not self.train_horizons or min(self.train_horizons) < 1:
            raise ValueError(
                "steps, repeats, denoiser_calls, train_batch, train_steps, train_horizons must be positive"
            )
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be positive, got {self.threads}")
        if not self.settings:
            raise ValueError("settings must hold at least one (horizon, sampling_steps, replan_every)")
        for h, s, r in self.settings:
            if not (1 <= r <= min(h, self.steps) and 1 <= s <= self.diffusion_steps):
                raise ValueError(
                    f"setting (horizon={h}, sampling_steps={s}, replan_every={r}): need 1 <= replan_every <= "
                    f"horizon, steps ({self.steps}) and 1 <= sampling_steps <= diffusion_steps ({self.diffusion_steps})"
                )
        self.denoiser_config(8)  # validates width/heads

    def denoiser_config(self, horizon: int) -> DenoiserConfig:
        """The training recipe's denoiser with this benchmark's size."""
        sizes = ("width", "heads", "blocks", "mlp_ratio", "diffusion_steps")
        return replace(_TRAIN.denoiser, horizon=horizon, **{k: getattr(self, k) for k in sizes})


# ---------------------------------------------------------------------------------------- helpers
def _split(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` nearly equal counts (the turns of a loop that takes turns)."""
    return [total // parts + (k < total % parts) for k in range(parts)]


def planners(
    config: DiffusionBenchConfig,
) -> tuple[DenoiserConfig | None, dict[tuple[int, int, int], dict[str, Any] | None], float]:
    """The checkpoint's denoiser config (None: random weights), the settings to time, each with its weights,
    and the guidance weight (the checkpoint's own)."""
    if config.checkpoint is None:
        return None, {s: None for s in config.settings}, config.guidance
    module = load(config.checkpoint).module
    if not isinstance(module, DiffusionPlanner):
        raise ValueError(f"{config.checkpoint} holds a {type(module).__name__}, not a DiffusionPlanner")
    trained, state = module.denoiser.config, module.denoiser.state_dict()
    kept = [s for s in config.settings if s[0] == trained.horizon and s[1] <= trained.diffusion_steps]
    own = (trained.horizon, module.sampling_steps, module.replan_every)
    skipped = [s for s in config.settings if s not in kept]
    if skipped:
        print(f"skipping settings {skipped}: the checkpoint's horizon is {trained.horizon}")
    return trained, {s: state for s in dict.fromkeys([*kept, own] if own not in kept else kept)}, module.guidance


def build_policy(
    config: DiffusionBenchConfig, setting: tuple[int, int, int], trained: DenoiserConfig | None, state, guidance: float
) -> Policy:
    """The planner of one (horizon, sampling steps, replan every) setting behind the policy API: the trained
    denoiser's config and weights (``state``) when there are, else random weights of this benchmark's size."""
    horizon, sampling_steps, replan_every = setting
    denoiser = trained or config.denoiser_config(horizon)
    planner = DiffusionPlanner(denoiser, sampling_steps, replan_every, config.seed, guidance=guidance)
    if state is not None:
        planner.denoiser.load_state_dict(state)
    return planner_policy(planner, {"arch": "diffusion", "checkpoint": str(config.checkpoint or "random weights")})


def reference_actor(config: DiffusionBenchConfig) -> tuple[torch.nn.Module, list[dict[str, torch.Tensor]]]:
    """The reference workload: a batch-1 EIT actor (``NetConfig`` defaults) and ``ref_n``-object observations.

    The actor comes from the ``entity_actor`` builder of the checkpoint registry (what ``ecrl.load`` builds
    actors with), so that this package does not import ``ecrl.policies``.
    """
    actor = build_registered("entity_actor", {"net": {}, "action_dim": 2, "stochastic": True}).eval()
    obs = rollout_observations(config.ref_n, 16, config.seed)
    return actor, [{k: torch.as_tensor(v, dtype=torch.float32)[None] for k, v in o.items()} for o in obs]


# ---------------------------------------------------------------------------------------- latency
class _Rollout:
    """One (N, setting): its env, policy and timings, advanced a few steps at a time."""

    def __init__(self, n: int, setting: tuple[int, int, int], policy: Policy, seed: int) -> None:
        self.n, self.setting, self.policy = n, setting, policy
        self.env = gym.make("ecrl/Push-v0", n_objects=n)
        self.obs, _ = self.env.reset(seed=seed)
        self.since_reset = 0
        self.plan_ms: list[float] = []
        self.read_ms: list[float] = []
        self.env_ms: list[float] = []
        self.ref_ms: list[float] = []

    def advance(self, count: int, reference, timed: bool = True) -> None:
        replan_every = self.setting[2]
        actor, ref_obs = reference
        clock = time.perf_counter
        for _ in range(count):
            t0 = clock()
            action = self.policy.act(self.obs)
            t1 = clock()
            self.obs, _, terminated, truncated, _ = self.env.step(action)
            t2 = clock()
            with torch.inference_mode():
                actor(ref_obs[self.since_reset % len(ref_obs)])
            t3 = clock()
            act_ms, env_ms, ref_ms = 1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t3 - t2)
            if timed:
                (self.plan_ms if self.since_reset % replan_every == 0 else self.read_ms).append(act_ms)
                self.env_ms.append(env_ms)
                self.ref_ms.append(ref_ms)
            self.since_reset += 1
            if terminated or truncated:  # resets are not timed
                self.obs, _ = self.env.reset()
                self.policy.reset()
                self.since_reset = 0

    def row(self) -> dict[str, Any]:
        horizon, sampling_steps, replan_every = self.setting
        plan = latency_stats(self.plan_ms, with_min=True)
        read = float(np.median(self.read_ms)) if self.read_ms else 0.0
        per_step = (plan["median_ms"] + (replan_every - 1) * read) / replan_every
        ref = float(np.median(self.ref_ms))
        return {
            "n_objects": self.n,
            "horizon": horizon,
            "sampling_steps": sampling_steps,
            "replan_every": replan_every,
            "denoiser_calls_per_step": sampling_steps / replan_every,
            "plan_median_ms": plan["median_ms"],
            "plan_p90_ms": plan["p90_ms"],
            "plan_min_ms": plan["min_ms"],
            "plans": plan["calls"],
            "read_median_ms": read,
            "per_step_ms": per_step,
            "per_step_mean_ms": float(np.mean(self.plan_ms + self.read_ms)),
            "env_step_median_ms": float(np.median(self.env_ms)),
            "env_step_p90_ms": float(np.percentile(self.env_ms, 90)),
            "steps": len(self.env_ms),
            "ref_median_ms": ref,
            "per_step_vs_ref": per_step / ref,
        }


def denoiser_inputs(model: EntityDenoiser, obs: dict[str, np.ndarray]) -> tuple:
    """Batch-1 denoiser arguments at a mid noise level for one env observation."""
    observation = torch.as_tensor(obs["observation"], dtype=torch.float32)[None]
    goal = torch.as_tensor(obs["desired_goal"], dtype=torch.float32)[None]
    static, state0 = split_rows(observation[:, None])
    shape, generator = model.config, torch.Generator().manual_seed(0)
    states = torch.randn((1, shape.horizon + 1, *state0.shape[2:]), generator=generator)
    actions = torch.randn((1, shape.horizon, shape.action_dim), generator=generator)
    mask = observation[..., ENTITY_PRESENT] > 0.5
    goal_mask = goal[..., GOAL_PRESENT] > 0.5
    return states, actions, shape.diffusion_steps // 2, static, goal_features(goal), mask, goal_mask


def time_denoiser(config: DiffusionBenchConfig, trained: DenoiserConfig | None, state) -> list[dict[str, Any]]:
    """Batch-1 denoiser call latency per (N, horizon), the cases taking turns."""
    horizons = sorted({s[0] for s in config.settings}) if trained is None else [trained.horizon]
    cases = {}
    for n in config.n_objects:
        obs = rollout_observations(n, 1, config.seed)[0]
        for h in horizons:
            model = EntityDenoiser(trained or config.denoiser_config(h)).eval()
            if state is not None:
                model.load_state_dict(state)
            inputs = denoiser_inputs(model, obs)
            tokens = inputs[0].shape[1] * inputs[0].shape[2] + inputs[1].shape[1] + inputs[4].shape[1]
            cases[(n, h)] = (model, inputs, tokens, [])
    with torch.inference_mode():
        for model, inputs, _, _ in cases.values():  # first calls allocate: not timed
            model(*inputs)
        for count in _split(config.denoiser_calls, config.repeats):
            for model, inputs, _, ms in cases.values():
                ms.extend(call_ms(lambda m=model, i=inputs: m(*i)) for _ in range(count))
    return [{"n_objects": n, "horizon": h, "tokens": c[2], **latency_stats(c[3])} for (n, h), c in cases.items()]


# ---------------------------------------------------------------------------------------- training
def synthetic_windows(config: DiffusionBenchConfig, horizon: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``train_batch`` windows of ``horizon`` steps cut from a random-action rollout (never across a reset)."""
    env = gym.make("ecrl/Push-v0", n_objects=config.train_n_objects)
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
    t = rng.choice(starts, size=config.train_batch)[:, None] + np.arange(horizon + 1)
    rows_a, goal_a, action_a = np.asarray(rows, np.float32), np.asarray(goals, np.float32), np.asarray(actions)
    return {
        "observation": rows_a[t],
        "action": action_a[t[:, :-1]],
        "desired_goal": goal_a[t[:, 0]],
        "valid": np.ones((config.train_batch, horizon), bool),
    }


def time_training(config: DiffusionBenchConfig, trained: DenoiserConfig | None) -> list[dict[str, Any]]:
    """Windows/s of the training step per horizon, the horizons taking turns."""
    from ecrl.datasets import DemoDataset

    dataset = None if config.dataset is None else DemoDataset(config.dataset)
    if dataset is not None and len(dataset) == 0:
        raise ValueError(f"dataset {config.dataset} holds no episodes")
    keys = ("observation", "action", "desired_goal", "mask", "goal_mask", "valid")
    rng = np.random.default_rng(config.seed)
    cases = {}
    for h in config.train_horizons:
        cfg = config.denoiser_config(h) if trained is None else DenoiserConfig(**{**asdict(trained), "horizon": h})
        torch.manual_seed(config.seed)
        model = EntityDenoiser(cfg).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=_TRAIN.lr, weight_decay=_TRAIN.weight_decay)
        ema = EMA(model, _TRAIN.ema_decay)
        batches = []
        for _ in range(4):
            raw = (
                synthetic_windows(config, h, rng)
                if dataset is None
                else dataset.sample_windows(config.train_batch, h, rng)
            )
            batches.append({k: torch.as_tensor(raw[k]) for k in keys if k in raw})
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


# ---------------------------------------------------------------------------------------- measure
def measure(config: DiffusionBenchConfig) -> dict[str, Any]:
    """Every measurement; settings and N take turns within each repeat.

    Returns:
        ``threads``, ``weights`` (``random`` or the checkpoint), ``denoiser`` (its config), ``guidance``;
        ``reference``: the reference EIT actor call's median and p90 ms; ``latency``: a row per (N, setting)
        (planning and plan-reading ms, the amortised ms per env step, env step ms, the ratio to the
        reference); ``denoiser_call``: a row per (N, horizon) (tokens, median and p90 ms);
        ``training``: a row per horizon (best and median windows/s, ms per step).
    """
    torch.set_num_threads(config.threads or torch.get_num_threads())
    torch.manual_seed(config.seed)
    trained, chosen, guidance = planners(config)
    reference = reference_actor(config)
    rollouts = [
        _Rollout(n, setting, build_policy(config, setting, trained, state, guidance), config.seed)
        for n in config.n_objects
        for setting, state in chosen.items()
    ]

    def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        for rollout in rollouts:  # first calls allocate: not timed
            rollout.advance(config.warmup_steps, reference, timed=False)
        for count in _split(config.steps, config.repeats):
            for rollout in rollouts:
                rollout.advance(count, reference)
        state = None if trained is None else next(iter(chosen.values()))
        return time_denoiser(config, trained, state), time_training(config, trained)

    denoiser, training = gc_paused(run)
    for rollout in rollouts:
        rollout.env.close()
    ref_ms = [ms for r in rollouts for ms in r.ref_ms]
    return {
        "threads": torch.get_num_threads(),
        "weights": str(config.checkpoint) if config.checkpoint else "random",
        "denoiser": asdict(trained or config.denoiser_config(config.settings[0][0])),
        "guidance": guidance,
        "reference": {"label": f"EIT actor (NetConfig defaults), batch 1, N={config.ref_n}", **latency_stats(ref_ms)},
        "latency": [r.row() for r in rollouts],
        "denoiser_call": denoiser,
        "training": training,
    }
