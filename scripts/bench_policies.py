"""`ecrl-bench policies`: how fast the RL policies train and act on a CPU.

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

Garbage collection is off while a loop is timed. The torch thread count is set (``--threads``, default:
torch's own choice) and reported.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from ecrl.envs import MAX_OBJECTS
from ecrl.envs.task import default_horizon
from ecrl.policies.nets import NetConfig
from ecrl.reporting import markdown_table, report_header
from ecrl.timing import rollout_observations, time_calls

_DEFAULT_NET = NetConfig()
MODELS = ("mlp", "eit", "deepsets")


@dataclass(frozen=True)
class PoliciesArgs:
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
def build_sac(name: str, args: PoliciesArgs):
    """A SAC + HER model on ``ecrl/Push-v0`` whose replay buffer already holds one finished episode and more."""
    from stable_baselines3 import SAC, HerReplayBuffer

    from ecrl.policies.sb3 import EntitySACPolicy

    env = gym.make("ecrl/Push-v0", n_objects=args.n_objects)
    warmup = default_horizon(args.n_objects) + 50
    if name == "mlp":
        policy: Any = "MultiInputPolicy"
        kwargs: dict[str, Any] = {"net_arch": list(args.net_arch)}
    else:
        policy, kwargs = EntitySACPolicy, {"net": args.net_config(name)}
    model = SAC(
        policy,
        env,
        learning_starts=warmup,
        batch_size=args.batch_size,
        replay_buffer_class=HerReplayBuffer,
        policy_kwargs=kwargs,
        seed=args.seed,
        verbose=0,
    )
    model.learn(total_timesteps=warmup)  # random actions up to learning_starts: no update yet
    if args.warmup_updates:
        model.train(gradient_steps=args.warmup_updates, batch_size=args.batch_size)
    return model


def label(name: str, args: PoliciesArgs) -> str:
    """A network's name in the tables, with its size."""
    if name == "mlp":
        return f"SB3 MultiInputPolicy, MLP {list(args.net_arch)}"
    if name == "deepsets":
        return f"DeepSets, width {args.width}"
    return f"EIT, width {args.width}, {args.heads} head(s), {args.blocks} block(s), MLP ratio {args.mlp_ratio}"


def _params(model) -> int:
    return sum(p.numel() for p in model.policy.actor.parameters()) + sum(
        p.numel() for p in model.policy.critic.parameters()
    )


def latency_actors(models: dict[str, Any], args: PoliciesArgs) -> dict[str, torch.nn.Module]:
    """Batch-1 inference actors: the trained entity-centric actors, and SB3's MLP actor built for `latency_n`."""
    from ecrl.policies.actor import EntityActorModule, FlatActorModule

    actors: dict[str, torch.nn.Module] = {}
    for name, model in models.items():
        action_dim = int(model.action_space.shape[0])
        if name == "mlp":
            actors[name] = FlatActorModule("sac", args.latency_n, list(args.net_arch), action_dim)
        else:
            actor = model.policy.actor
            module = EntityActorModule(asdict(actor.net_config), action_dim, stochastic=True)
            module.net.load_state_dict(actor.net.state_dict())
            actors[name] = module
    return {k: v.eval() for k, v in actors.items()}


# ---------------------------------------------------------------------------------------- timing
def measure(args: PoliciesArgs) -> dict[str, Any]:
    """Every measurement; models take turns within each repeat."""
    import ecrl.envs  # noqa: F401  (registers ecrl/Push-v0)

    torch.set_num_threads(args.threads or torch.get_num_threads())
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    models = {name: build_sac(name, args) for name in args.models}
    setup_s = time.perf_counter() - start

    rates: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.repeats):
        for name, model in models.items():
            seconds = time_calls(
                lambda m=model: m.train(gradient_steps=args.gradient_steps, batch_size=args.batch_size), 1
            )
            rates[name].append(args.gradient_steps / seconds)

    actors = latency_actors(models, args)
    observations = rollout_observations(args.latency_n, 32, args.seed)
    tensors = [{k: torch.as_tensor(v, dtype=torch.float32)[None] for k, v in o.items()} for o in observations]
    latencies: dict[str, list[float]] = {name: [] for name in actors}
    per_turn = max(1, args.latency_calls // args.repeats)
    with torch.inference_mode():
        for actor in actors.values():  # first calls allocate: not timed
            for obs in tensors[:3]:
                actor(obs)
        for _ in range(args.repeats):
            for name, actor in actors.items():
                for i in range(per_turn):
                    obs = tensors[i % len(tensors)]
                    latencies[name].append(time_calls(lambda a=actor, o=obs: a(o), 1) * 1e3)

    update_rows = []
    for name, model in models.items():
        best, median = max(rates[name]), float(np.median(rates[name]))
        row = {
            "model": name,
            "label": label(name, args),
            "params": _params(model),
            "updates_per_s_best": best,
            "updates_per_s_median": median,
        }
        if "mlp" in models:
            row["vs_mlp_best"] = best / max(rates["mlp"])
            row["vs_mlp_median"] = median / float(np.median(rates["mlp"]))
        update_rows.append(row)
    latency_rows = [
        {
            "model": name,
            "label": label(name, args),
            "n_objects": args.latency_n,
            "median_ms": float(np.median(ms)),
            "p90_ms": float(np.percentile(ms, 90)),
            "min_ms": float(np.min(ms)),
            "calls": len(ms),
        }
        for name, ms in latencies.items()
    ]
    return {
        "threads": torch.get_num_threads(),
        "setup_s": setup_s,
        "updates": update_rows,
        "latency": latency_rows,
        "raw": {"updates_per_s": rates},
    }


def check_targets(args: PoliciesArgs, result: dict[str, Any]) -> list[dict[str, Any]]:
    """PASS/FAIL per target (each needs the models it compares)."""
    updates = {r["model"]: r for r in result["updates"]}
    latency = {r["model"]: r for r in result["latency"]}
    targets = []
    if "eit" in updates and "mlp" in updates:
        ratio = updates["eit"][f"vs_mlp_{args.reduce}"]
        targets.append(
            {
                "target": f"EIT SAC updates/s >= {args.min_update_ratio:.2f} x the MLP's ({args.reduce} of {args.repeats})",
                "value": f"{ratio:.3f}x",
                "pass": ratio >= args.min_update_ratio,
            }
        )
    if "eit" in latency:
        ms = latency["eit"]["median_ms"]
        targets.append(
            {
                "target": f"EIT actor latency, batch 1, N={args.latency_n}: median <= {args.max_latency_ms:g} ms",
                "value": f"{ms:.3f} ms",
                "pass": ms <= args.max_latency_ms,
            }
        )
    return targets


# ---------------------------------------------------------------------------------------- outputs
def tables(result: dict[str, Any]) -> str:
    """Markdown tables: updates/s, actor latency, targets."""
    has_ratio = any("vs_mlp_best" in r for r in result["updates"])
    header = ["network", "parameters (actor + critic)", "updates/s (best)", "updates/s (median)"]
    header += ["vs MLP (best)", "vs MLP (median)"] if has_ratio else []
    rows = []
    for r in result["updates"]:
        row = [r["label"], f"{r['params']:,}", f"{r['updates_per_s_best']:.1f}", f"{r['updates_per_s_median']:.1f}"]
        row += [f"{r['vs_mlp_best']:.3f}x", f"{r['vs_mlp_median']:.3f}x"] if has_ratio else []
        rows.append(row)
    parts = [markdown_table(header, rows)]
    lat = result["latency"]
    if lat:
        header = [f"actor, batch 1, N={lat[0]['n_objects']}", "median ms", "p90 ms", "min ms"]
        rows = [[r["label"], f"{r['median_ms']:.3f}", f"{r['p90_ms']:.3f}", f"{r['min_ms']:.3f}"] for r in lat]
        parts.append(markdown_table(header, rows))
    if result["targets"]:
        rows = [[t["target"], t["value"], "PASS" if t["pass"] else "FAIL"] for t in result["targets"]]
        parts.append(markdown_table(["target", "value", "result"], rows, align="lrl"))
    return "\n\n".join(parts)


def plot(result: dict[str, Any], args: PoliciesArgs, path: Path) -> None:
    """Updates/s per network (with the target line) and actor latency per network."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(8.5, 3.4), dpi=120)
    updates = result["updates"]
    names = [r["model"] for r in updates]
    x = np.arange(len(names))
    left.bar(x - 0.2, [r["updates_per_s_best"] for r in updates], 0.4, label="best")
    left.bar(x + 0.2, [r["updates_per_s_median"] for r in updates], 0.4, label="median")
    mlp = next((r for r in updates if r["model"] == "mlp"), None)
    if mlp is not None:
        left.axhline(
            mlp[f"updates_per_s_{args.reduce}"] * args.min_update_ratio, color="k", ls=":", label="target (EIT)"
        )
    left.set(
        xticks=x,
        xticklabels=names,
        ylabel="SAC updates / s",
        title=f"batch {args.batch_size}, N={args.n_objects}, {result['threads']} thread(s)",
    )
    left.legend(fontsize=8)
    lat = result["latency"]
    x = np.arange(len(lat))
    right.bar(x - 0.2, [r["median_ms"] for r in lat], 0.4, label="median")
    right.bar(x + 0.2, [r["p90_ms"] for r in lat], 0.4, label="p90")
    right.axhline(args.max_latency_ms, color="k", ls=":", label="target (EIT)")
    right.set(
        xticks=x,
        xticklabels=[r["model"] for r in lat],
        ylabel="ms per call",
        title=f"actor latency, batch 1, N={args.latency_n}",
    )
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_readme(path: Path, command: str, args: PoliciesArgs, result: dict[str, Any]) -> None:
    m, net = result["machine"], args.net_config("eit")
    lines = [
        *report_header("Policy speed", command),
        f"SAC + HerReplayBuffer on `ecrl/Push-v0` with {args.n_objects} objects, batch {args.batch_size}: "
        f"`model.train(gradient_steps={args.gradient_steps})` timed {args.repeats} times per network, the networks "
        f"taking turns. EIT: width {net.width}, {net.heads} head(s), {net.blocks} block(s) before and after the "
        f"cross-attention, MLP ratio {net.mlp_ratio}; DeepSets: width {net.width}; flat MLP: net_arch "
        f"{list(args.net_arch)}. Actor latency: one `ecrl/Push-v0` observation with {args.latency_n} objects per "
        f"call under `torch.inference_mode()`, {result['latency'][0]['calls'] if result['latency'] else 0} calls "
        f"per actor. Targets use the {args.reduce} repeat. torch {m['torch']} on {result['threads']} thread(s); "
        f"machine: {m['cpus']} CPUs ({m['processor']}).",
        "",
        tables(result),
        "",
        "![updates/s and latency](speed.png)",
    ]
    path.write_text("\n".join(lines) + "\n")


FIGURE = "speed.png"
