"""How fast the RL policies train and act on a CPU: the measurement of ``ecrl-bench policies``.

:func:`measure` takes a :class:`PoliciesBenchConfig` and returns the numbers; the CLI
(:mod:`ecrl.scripts.bench_policies`) checks the targets and writes the tables, plot and README.

Two measurements:

* **SAC updates/s.** SAC + ``HerReplayBuffer`` on ``ecrl/Push-v0`` with ``n_objects`` objects, one model
  per network: SB3's stock ``MultiInputPolicy`` (a flat MLP, ``net_arch`` [256, 256] as SB3 defaults),
  the Entity Interaction Transformer and DeepSets (:mod:`ecrl.policies.sb3`). Each model first fills
  its replay buffer past one episode with random actions (HER samples finished episodes only) and runs
  a few untimed updates; then ``model.train(gradient_steps, batch_size)`` is timed directly, the models
  taking turns within every repeat so that they see the same machine load.
* **Actor latency.** One observation (batch 1) of ``ecrl/Push-v0`` with `latency_n` objects through
  the inference actors under ``torch.inference_mode()``: the entity-centric
  :class:`~ecrl.policies.actor.EntityActorModule` (EIT, DeepSets; weights of the trained SAC actors,
  which run on any N) and, for reference, SB3's MLP actor built for that N
  (:class:`~ecrl.policies.actor.FlatActorModule`). Observations come from a random-action rollout and
  are converted to tensors before timing; each call is timed on its own, median and 90th percentile.

Garbage collection is off while a loop is timed. The torch thread count is set (``threads``, default:
torch's own choice) and reported.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import torch

from ecrl.envs import MAX_OBJECTS  # importing ecrl.envs registers ecrl/Push-v0
from ecrl.envs.task import default_horizon
from ecrl.policies.nets import NetConfig
from ecrl.timing import call_ms, latency_stats, reduce_rates, rollout_observations, time_calls

__all__ = ["MODELS", "PoliciesBenchConfig", "build_sac", "label", "latency_actors", "measure"]

_DEFAULT_NET = NetConfig()
MODELS = ("mlp", "eit", "deepsets")


@dataclass(frozen=True)
class PoliciesBenchConfig:
    """Policy speed: SAC+HER updates/s (SB3 MLP vs EIT vs DeepSets) and batch-1 actor latency."""

    models: tuple[str, ...] = ("mlp", "eit", "deepsets")
    """Networks to time: any of mlp, eit, deepsets (the targets need mlp and eit)."""
    n_objects: int = 3
    """Objects in the training env of the update benchmark (ecrl/Push-v0)."""
    batch_size: int = 256
    """Replay batch size of every gradient update."""
    gradient_steps: int = 25
    """Gradient updates per timed `model.train` call."""
    repeats: int = 7
    """Timed calls per model (the models take turns within each repeat)."""
    warmup_updates: int = 3
    """Untimed updates per model before timing."""
    width: int = _DEFAULT_NET.width
    """EIT and DeepSets token width (default: `NetConfig`'s)."""
    heads: int = _DEFAULT_NET.heads
    """EIT attention heads (default: `NetConfig`'s)."""
    blocks: int = _DEFAULT_NET.blocks
    """EIT self-attention blocks before and after the cross-attention (default: `NetConfig`'s)."""
    mlp_ratio: int = _DEFAULT_NET.mlp_ratio
    """Hidden width of the EIT blocks' MLPs, as a multiple of `width` (default: `NetConfig`'s)."""
    net_arch: tuple[int, ...] = (256, 256)
    """Hidden layers of the flat MLP baseline (SB3's default for SAC)."""
    threads: int | None = None
    """torch CPU threads (default: torch's own choice, usually the number of cores)."""
    latency_n: int = 12
    """Objects in the observation of the latency benchmark."""
    latency_calls: int = 300
    """Timed batch-1 actor calls per actor (in turns of `latency_calls / repeats`)."""
    min_update_ratio: float = 1 / 3
    """Target: EIT updates/s at least this fraction of the MLP's."""
    max_latency_ms: float = 1.0
    """Target: median EIT actor latency (batch 1, `latency_n` objects) at most this many milliseconds."""
    reduce: Literal["best", "median"] = "best"
    """Which of the repeats the targets and the plot use: the fastest (noise only adds time) or the median."""
    seed: int = 0
    """Seed of the models, the random warm-up actions and the rollouts."""
    strict: bool = False
    """Exit with status 1 when a target fails."""
    out: Path = Path("results/bench_policies")
    """Output directory (created if missing): bench.json, README.md, speed.png."""

    def __post_init__(self) -> None:
        if not 1 <= self.n_objects <= MAX_OBJECTS or not 1 <= self.latency_n <= MAX_OBJECTS:
            raise ValueError(f"n_objects and latency_n must be in 1 … {MAX_OBJECTS}")
        if min(self.batch_size, self.gradient_steps, self.repeats, self.latency_calls) < 1 or self.warmup_updates < 0:
            raise ValueError("batch_size, gradient_steps, repeats and latency_calls must be positive")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be positive, got {self.threads}")
        unknown = set(self.models) - set(MODELS)
        if not self.models or unknown:
            raise ValueError(f"models must be a non-empty subset of {list(MODELS)}, got {self.models}")
        self.net_config("eit")  # validates width/heads

    def net_config(self, arch: str) -> NetConfig:
        return NetConfig(arch=arch, width=self.width, heads=self.heads, blocks=self.blocks, mlp_ratio=self.mlp_ratio)


# ---------------------------------------------------------------------------------------- models
def build_sac(name: str, config: PoliciesBenchConfig):
    """A SAC + HER model on ``ecrl/Push-v0`` whose replay buffer already holds one finished episode and more."""
    from stable_baselines3 import SAC, HerReplayBuffer

    from ecrl.policies.sb3 import EntitySACPolicy

    env = gym.make("ecrl/Push-v0", n_objects=config.n_objects)
    warmup = default_horizon(config.n_objects) + 50
    if name == "mlp":
        policy: Any = "MultiInputPolicy"
        kwargs: dict[str, Any] = {"net_arch": list(config.net_arch)}
    else:
        policy, kwargs = EntitySACPolicy, {"net": config.net_config(name)}
    model = SAC(
        policy,
        env,
        learning_starts=warmup,
        batch_size=config.batch_size,
        replay_buffer_class=HerReplayBuffer,
        policy_kwargs=kwargs,
        seed=config.seed,
        verbose=0,
    )
    model.learn(total_timesteps=warmup)  # random actions up to learning_starts: no update yet
    if config.warmup_updates:
        model.train(gradient_steps=config.warmup_updates, batch_size=config.batch_size)
    return model


def label(name: str, config: PoliciesBenchConfig) -> str:
    """A network's name in the tables, with its size."""
    if name == "mlp":
        return f"SB3 MultiInputPolicy, MLP {list(config.net_arch)}"
    if name == "deepsets":
        return f"DeepSets, width {config.width}"
    return f"EIT, width {config.width}, {config.heads} head(s), {config.blocks} block(s), MLP ratio {config.mlp_ratio}"


def _params(model) -> int:
    return sum(p.numel() for p in model.policy.actor.parameters()) + sum(
        p.numel() for p in model.policy.critic.parameters()
    )


def latency_actors(models: dict[str, Any], config: PoliciesBenchConfig) -> dict[str, torch.nn.Module]:
    """Batch-1 inference actors: the trained entity-centric actors, and SB3's MLP actor built for `latency_n`."""
    from ecrl.policies.actor import EntityActorModule, FlatActorModule

    actors: dict[str, torch.nn.Module] = {}
    for name, model in models.items():
        action_dim = int(model.action_space.shape[0])
        if name == "mlp":
            actors[name] = FlatActorModule("sac", config.latency_n, list(config.net_arch), action_dim)
        else:
            actor = model.policy.actor
            module = EntityActorModule(asdict(actor.net_config), action_dim, stochastic=True)
            module.net.load_state_dict(actor.net.state_dict())
            actors[name] = module
    return {k: v.eval() for k, v in actors.items()}


# ---------------------------------------------------------------------------------------- timing
def _time_updates(models: dict[str, Any], config: PoliciesBenchConfig) -> dict[str, list[float]]:
    """Gradient updates per second of every timed ``model.train`` call, per model; the models take turns."""
    rates: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(config.repeats):
        for name, model in models.items():
            seconds = time_calls(
                lambda m=model: m.train(gradient_steps=config.gradient_steps, batch_size=config.batch_size), 1
            )
            rates[name].append(config.gradient_steps / seconds)
    return rates


def _time_actors(actors: dict[str, torch.nn.Module], config: PoliciesBenchConfig) -> dict[str, list[float]]:
    """Milliseconds of every timed batch-1 call, per actor; the actors take turns."""
    observations = rollout_observations(config.latency_n, 32, config.seed)
    tensors = [{k: torch.as_tensor(v, dtype=torch.float32)[None] for k, v in o.items()} for o in observations]
    latencies: dict[str, list[float]] = {name: [] for name in actors}
    per_turn = max(1, config.latency_calls // config.repeats)
    with torch.inference_mode():
        for actor in actors.values():  # first calls allocate: not timed
            for obs in tensors[:3]:
                actor(obs)
        for _ in range(config.repeats):
            for name, actor in actors.items():
                for i in range(per_turn):
                    obs = tensors[i % len(tensors)]
                    latencies[name].append(call_ms(lambda a=actor, o=obs: a(o)))
    return latencies


def measure(config: PoliciesBenchConfig) -> dict[str, Any]:
    """Every measurement; models take turns within each repeat.

    Returns:
        ``threads``, ``setup_s`` (building the models and filling their buffers); ``updates``: a row per
        model (its label, parameters, best and median updates/s, and their ratios to the MLP's when it was
        timed); ``latency``: a row per actor (median, p90 and min ms of a batch-1 call, calls);
        ``raw``: every repeat's updates/s.
    """
    torch.set_num_threads(config.threads or torch.get_num_threads())
    torch.manual_seed(config.seed)
    start = time.perf_counter()
    models = {name: build_sac(name, config) for name in config.models}
    setup_s = time.perf_counter() - start
    rates = _time_updates(models, config)
    latencies = _time_actors(latency_actors(models, config), config)

    update_rows = []
    for name, model in models.items():
        best, median = reduce_rates(rates[name], "best"), reduce_rates(rates[name], "median")
        row = {
            "model": name,
            "label": label(name, config),
            "params": _params(model),
            "updates_per_s_best": best,
            "updates_per_s_median": median,
        }
        if "mlp" in models:
            row["vs_mlp_best"] = best / reduce_rates(rates["mlp"], "best")
            row["vs_mlp_median"] = median / reduce_rates(rates["mlp"], "median")
        update_rows.append(row)
    latency_rows = [
        {"model": name, "label": label(name, config), "n_objects": config.latency_n, **latency_stats(ms, with_min=True)}
        for name, ms in latencies.items()
    ]
    return {
        "threads": torch.get_num_threads(),
        "setup_s": setup_s,
        "updates": update_rows,
        "latency": latency_rows,
        "raw": {"updates_per_s": rates},
    }
