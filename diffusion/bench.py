"""How fast the diffusion planner plans and trains on a CPU: the measurement of ``ecrl-bench diffusion``.

:func:`measure` takes a :class:`DiffusionBenchConfig` and returns the numbers; the CLI
(:mod:`ecrl.scripts.bench_diffusion`) checks the target and writes the tables, plot and README.

The planning env (``env``, :mod:`ecrl.diffusion.bench_env`) is the push task (``ecrl/Push-v0`` with N
objects, the default) or OGBench's cubes (``ecrl/OGBenchCube-v0`` with N = 1, 2, 3, 4 or 8 cubes, task
mode, one evaluation task ``task_id``; extra ``ecrl[ogbench]``). The random-weight planners take the
env's action width and planned state (``planar`` / ``spatial``); a checkpoint brings its own and picks
the env it was trained in (its ``meta["env"]``) unless ``env`` says otherwise, which is refused.

Three measurements:

* **Planning latency per env step.** A :class:`~ecrl.diffusion.planner.DiffusionPlanner` behind the
  library's policy API (:func:`ecrl.diffusion.train.planner_policy`) acts in the env with N objects,
  batch 1, for every (horizon, sampling steps, replan every) setting and N: each ``policy.act(obs)``
  and each ``env.step`` is timed on its own. A call that samples a plan makes ``sampling_steps``
  denoiser calls; the next ``replan_every - 1`` calls only read the plan. The per-step cost is
  amortised over ``replan_every``: (median planning call + (replan_every - 1) x median plan-reading
  call) / replan_every. The env step is reported beside it (median ms), and env steps/s with
  planning = 1000 / (planning ms per step + env step ms). Random weights by default (the cost does
  not depend on them); ``checkpoint`` times a trained planner instead (settings with another horizon
  are skipped).
* **One denoiser call** (batch 1, under ``torch.inference_mode()``) per N and horizon, on an
  observation of the env.
* **Training throughput.** Windows/s of the training step of ``ecrl-train-diffusion`` (DDPM
  :func:`~ecrl.diffusion.noise.loss`, backward, gradient clipping, AdamW, EMA update) at batch
  ``train_batch``: windows from ``dataset`` (``DemoDataset.sample_windows``; goals relabelled in
  hindsight for play data, as training does; the dataset must come from the planning env) or, without
  one, windows of a random-action rollout of the env with ``train_n_objects`` objects. Batches are
  built before timing.

The machine is shared and noisy, so a reference runs in the same loops: one batch-1 call of the EIT
actor (the ``entity_actor`` builder, ``NetConfig`` defaults, random weights; built through the
checkpoint registry, :func:`ecrl.checkpoint.build`, as this package does not import ``ecrl.policies``)
on a ``ref_n``-object push observation after every timed env step (in every env, so that rows of both
envs share one yardstick); latencies are also reported as multiples of its median. Settings, N and
horizons take turns within every repeat. Garbage collection is off while a loop is timed.

OGBench's cubes with a trained planner (planning ms per env step and env steps/s with planning at 2,
3, 4 and 8 cubes; training windows/s on its play data)::

    ecrl-bench diffusion --env ogbench-cube --n-objects 2 3 4 8 --settings 8 5 4 \\
        --checkpoint <run>/final --dataset <play data> --threads 1 --out results/bench_ogbench_planning
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from ecrl.checkpoint import build as build_registered
from ecrl.diffusion.bench_env import (
    BenchEnv,
    action_dim,
    check_sizes,
    checkpoint_env,
    env_id,
    env_observations,
    make_env,
    state_of,
)
from ecrl.diffusion.bench_training import time_training, training_dataset
from ecrl.diffusion.denoiser import DenoiserConfig, EntityDenoiser, goal_features
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.diffusion.train import DiffusionTrainConfig, planner_policy
from ecrl.envs import MAX_OBJECTS
from ecrl.envs.layout import ENTITY_PRESENT, GOAL_PRESENT
from ecrl.envs.ogbench import N_TASKS
from ecrl.policy import Policy, load
from ecrl.timing import call_ms, gc_paused, latency_stats, rollout_observations

__all__ = ["DiffusionBenchConfig", "measure"]

_TRAIN = DiffusionTrainConfig()


@dataclass(frozen=True)
class DiffusionBenchConfig:
    """Diffusion planner speed: planning latency per env step, one denoiser call, training windows/s."""

    env: BenchEnv | None = None
    """Planning env: push (ecrl/Push-v0) or ogbench-cube (ecrl/OGBenchCube-v0, task mode; extra ecrl[ogbench]); default: the checkpoint's env, else push."""
    n_objects: tuple[int, ...] = (3, 12)
    """Objects in the planning env (push: 1 … 16; ogbench-cube: 1, 2, 3, 4 or 8 cubes); the target uses the first."""
    task_id: int = 2
    """OGBench evaluation task (1 … 5) that the ogbench-cube env resets to (ignored in push)."""
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
    """A trained planner (`ecrl.load`-able) to time instead of random weights; only settings with its horizon run, in its env (`--env` must agree)."""
    ref_n: int = 12
    """Objects in the observation of the reference EIT actor call."""
    train_horizons: tuple[int, ...] = (4, 8, 16)
    """Horizons of the training-throughput benchmark."""
    train_batch: int = _TRAIN.batch_size
    """Windows per training step."""
    train_n_objects: int = 3
    """Objects in the synthetic training windows, a random-action rollout of the planning env (ignored with --dataset)."""
    train_steps: int = 10
    """Timed training steps per horizon and repeat."""
    dataset: Path | None = None
    """Dataset (ecrl-collect) of the planning env to draw training windows from (default: synthetic windows)."""
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
        # Without env, a checkpoint's env is only known once it is loaded: measure() checks again then.
        if not self.n_objects:
            raise ValueError("n_objects must name at least one number of objects")
        check_sizes(self.planning_env, self.n_objects, "n_objects")
        check_sizes(self.planning_env, (self.train_n_objects,), "train_n_objects")
        if not 1 <= self.ref_n <= MAX_OBJECTS:
            raise ValueError(f"ref_n must be in 1 … {MAX_OBJECTS}, got {self.ref_n}")
        if not 1 <= self.task_id <= N_TASKS:
            raise ValueError(f"task_id must be in 1 … {N_TASKS}, got {self.task_id}")
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

    @property
    def planning_env(self) -> str:
        """``env``, or ``push`` when it is left to a checkpoint that is not loaded yet (or to the default)."""
        return self.env or "push"

    def denoiser_config(self, horizon: int) -> DenoiserConfig:
        """The training recipe's denoiser with this benchmark's size, the planning env's action width and state."""
        sizes = {k: getattr(self, k) for k in ("width", "heads", "blocks", "mlp_ratio", "diffusion_steps")}
        env = self.planning_env
        return replace(_TRAIN.denoiser, horizon=horizon, action_dim=action_dim(env), state=state_of(env), **sizes)


# ---------------------------------------------------------------------------------------- helpers
def _split(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` nearly equal counts (the turns of a loop that takes turns)."""
    return [total // parts + (k < total % parts) for k in range(parts)]


def planners(
    config: DiffusionBenchConfig,
) -> tuple[DenoiserConfig | None, dict[tuple[int, int, int], dict[str, Any] | None], float, str]:
    """The checkpoint's denoiser config (None: random weights), the settings to time, each with its weights,
    the guidance weight (the checkpoint's own) and the planning env (``config.env``, else the checkpoint's).

    Raises:
        ValueError: the checkpoint holds no ``DiffusionPlanner``, or was trained in another env than ``config.env``.
    """
    if config.checkpoint is None:
        return None, {s: None for s in config.settings}, config.guidance, config.planning_env
    policy = load(config.checkpoint)
    module = policy.module
    if not isinstance(module, DiffusionPlanner):
        raise ValueError(f"{config.checkpoint} holds a {type(module).__name__}, not a DiffusionPlanner")
    trained, state = module.denoiser.config, module.denoiser.state_dict()
    env = checkpoint_env(policy.meta, trained, str(config.checkpoint))
    if config.env is not None and config.env != env:
        raise ValueError(
            f"{config.checkpoint} was trained in env {env} ({trained.state} state, {trained.action_dim}-d actions), "
            f"not in --env {config.env}: pass --env {env} or leave --env out"
        )
    kept = [s for s in config.settings if s[0] == trained.horizon and s[1] <= trained.diffusion_steps]
    own = (trained.horizon, module.sampling_steps, module.replan_every)
    skipped = [s for s in config.settings if s not in kept]
    if skipped:
        print(f"skipping settings {skipped}: the checkpoint's horizon is {trained.horizon}")
    chosen = {s: state for s in dict.fromkeys([*kept, own] if own not in kept else kept)}
    return trained, chosen, module.guidance, env


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

    def __init__(self, config: DiffusionBenchConfig, n: int, setting: tuple[int, int, int], policy: Policy) -> None:
        self.n, self.setting, self.policy, self.env_name = n, setting, policy, config.planning_env
        self.env = make_env(self.env_name, n, config.task_id)
        if self.env.action_space.shape != policy.action_low.shape:
            raise ValueError(
                f"the planner acts with {policy.action_low.shape[0]}-d actions, env {self.env_name} takes "
                f"{self.env.action_space.shape[0]}-d ones"
            )
        self.obs, _ = self.env.reset(seed=config.seed)
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
        env_ms = float(np.median(self.env_ms))
        return {
            "env": self.env_name,
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
            "env_step_median_ms": env_ms,
            "env_step_p90_ms": float(np.percentile(self.env_ms, 90)),
            "steps_per_s_with_planning": 1e3 / (per_step + env_ms),
            "steps": len(self.env_ms),
            "ref_median_ms": ref,
            "per_step_vs_ref": per_step / ref,
        }


def denoiser_inputs(model: EntityDenoiser, obs: dict[str, np.ndarray]) -> tuple:
    """Batch-1 denoiser arguments at a mid noise level for one env observation."""
    observation = torch.as_tensor(obs["observation"], dtype=torch.float32)[None]
    goal = torch.as_tensor(obs["desired_goal"], dtype=torch.float32)[None]
    static, state0 = model.config.split(observation[:, None])
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
        obs = env_observations(config.planning_env, n, 1, config.seed, config.task_id)[0]
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
    env = config.planning_env
    return [
        {"env": env, "n_objects": n, "horizon": h, "tokens": c[2], **latency_stats(c[3])} for (n, h), c in cases.items()
    ]


# ---------------------------------------------------------------------------------------- measure
def measure(config: DiffusionBenchConfig) -> dict[str, Any]:
    """Every measurement; settings and N take turns within each repeat.

    Returns:
        ``env`` (push or ogbench-cube), ``env_id`` (its gymnasium id), ``task_id`` (OGBench's task; None in
        push), ``threads``, ``weights`` (``random`` or the checkpoint), ``denoiser`` (its config), ``guidance``;
        ``reference``: the reference EIT actor call's median and p90 ms; ``latency``: a row per (N, setting)
        (planning and plan-reading ms, the amortised ms per env step, env step ms, env steps/s with
        planning, the ratio to the reference); ``denoiser_call``: a row per (N, horizon) (tokens, median
        and p90 ms); ``training``: a row per horizon (best and median windows/s, ms per step). Every row
        names its env.

    Raises:
        ValueError: a checkpoint of another env than ``config.env``, numbers of objects its env lacks, or a
            dataset of another env.
    """
    torch.set_num_threads(config.threads or torch.get_num_threads())
    torch.manual_seed(config.seed)
    trained, chosen, guidance, env = planners(config)
    config = replace(config, env=env)  # a checkpoint's env: its numbers of objects are checked again
    dataset = None if config.dataset is None else training_dataset(config)  # refused before anything is timed
    reference = reference_actor(config)
    rollouts = [
        _Rollout(config, n, setting, build_policy(config, setting, trained, state, guidance))
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
        return time_denoiser(config, trained, state), time_training(config, trained, dataset)

    denoiser, training = gc_paused(run)
    for rollout in rollouts:
        rollout.env.close()
    ref_ms = [ms for r in rollouts for ms in r.ref_ms]
    return {
        "env": env,
        "env_id": env_id(env),
        "task_id": config.task_id if env == "ogbench-cube" else None,
        "threads": torch.get_num_threads(),
        "weights": str(config.checkpoint) if config.checkpoint else "random",
        "denoiser": asdict(trained or config.denoiser_config(config.settings[0][0])),
        "guidance": guidance,
        "reference": {
            "label": f"EIT actor (NetConfig defaults), batch 1, N={config.ref_n} (ecrl/Push-v0 observation)",
            **latency_stats(ref_ms),
        },
        "latency": [r.row() for r in rollouts],
        "denoiser_call": denoiser,
        "training": training,
    }
