"""Can an entity transformer imitate the push expert at N = 3 over every object? (issue 23, part 1: a probe)

Collects ``--demos`` scripted-expert episodes with 3 objects (colour × shape train part), behaviour-clones
an entity transformer on them, then runs ``--dagger`` DAgger rounds (the network acts, the expert labels).
After imitation and after each round it reports success over every object at N = 3 (30 episodes, tuning
seeds 300000+), and at the end at N = 2, 3, 4, 6 (50 episodes, seeds 300100+). No focus, no selection.

Two action heads:

- ``mse``: tanh of a 2-vector regressed onto the expert's action (what ``ecrl-train`` does);
- ``bins``: a categorical over a ``bins × bins`` grid of the action square, plus a per-cell offset; it acts
  with the most likely cell, so two ways round an object are not averaged into none.

Two networks: ``--net eit`` is the library's ``EntityNet`` (attention pool readout, absolute positions);
``--net probe`` is the same layout of blocks with optional agent-relative xy inputs on every entity and
goal row (``--relative 1``) and a readout from the agent's token (``--readout agent``) or the pool.

A one-off: its networks are not in the library. It writes ``--out`` (JSON: arguments, the imitation
log, final successes, the fit on 20 fresh expert episodes). One thread, minutes to an hour (see ``README.md``).
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np
import torch
from markov_expert import use_markov_expert  # this folder's (the script's folder is on sys.path)
from torch import nn

import ecrl.envs  # noqa: F401  (registers ecrl/Push-v0)
from ecrl.attention import AttentionBlock, AttentionPool, mlp
from ecrl.entities import ENTITY_DIM, GOAL_DIM
from ecrl.envs.layout import ENTITY_PRESENT, ENTITY_XY, GOAL_PRESENT, GOAL_XY
from ecrl.evaluation import evaluate
from ecrl.policies.demos import _Actor, _Labelled, _Labels, collect_demos
from ecrl.policies.nets import ENTITY_SCALE, GOAL_SCALE, EntityNet, NetConfig
from ecrl.rollout import ExpertPolicy, rollout

parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
parser.add_argument("--head", choices=("bins", "mse"), default="bins")
parser.add_argument("--net", choices=("eit", "probe"), default="probe")
parser.add_argument("--readout", choices=("pool", "agent"), default="pool")
parser.add_argument("--relative", type=int, choices=(0, 1), default=0)
parser.add_argument("--width", type=int, default=64)
parser.add_argument("--heads", type=int, default=4)
parser.add_argument("--blocks", type=int, default=2)
parser.add_argument("--demos", type=int, default=1000)
parser.add_argument("--bc", type=int, default=20000, help="behaviour-cloning steps before DAgger")
parser.add_argument("--dagger", type=int, default=2, help="DAgger rounds")
parser.add_argument("--dagger-eps", type=int, default=50)
parser.add_argument("--dagger-steps", type=int, default=4000)
parser.add_argument("--eval-every", type=int, default=0, help="log success at N = 3 every this many cloning steps")
parser.add_argument("--cosine", action="store_true", help="cosine learning-rate decay over the cloning steps")
parser.add_argument("--bins", type=int, default=11)
parser.add_argument("--batch", type=int, default=256)
parser.add_argument(
    "--expert",
    choices=("stateful", "markov"),
    default="stateful",
    help="stateful: the library's push expert (keeps its object until placed, steps out of stalls); "
    "markov: the same expert forgetting its state before every action, so its action is a function of the observation",
)
parser.add_argument("--out", required=True)
args = parser.parse_args()
if args.expert == "markov":
    use_markov_expert()  # demos, DAgger labels and the fit check all use it
torch.set_num_threads(1)
torch.manual_seed(0)
LR = 3e-4
K = args.bins
grid = torch.linspace(-1, 1, K)
CENTRES = torch.stack(torch.meshgrid(grid, grid, indexing="ij"), -1).reshape(-1, 2)


def make_env() -> gym.Env:
    return gym.make("ecrl/Push-v0", n_objects=3, goal="positions", split="colour_shape", part="train")


class ProbeNet(nn.Module):
    """Self-attention, cross-attention to goals, self-attention; optional agent-relative xy; agent or pool readout."""

    def __init__(self, width: int, heads: int, blocks: int, out: int) -> None:
        super().__init__()
        extra = 2 * args.relative
        self.embed_entity, self.embed_goal = (
            mlp([ENTITY_DIM + extra, width, width]),
            mlp([GOAL_DIM + extra, width, width]),
        )
        self.before = nn.ModuleList(AttentionBlock(width, heads, 2) for _ in range(blocks))
        self.cross = AttentionBlock(width, heads, 2)
        self.after = nn.ModuleList(AttentionBlock(width, heads, 2) for _ in range(blocks))
        self.pool = AttentionPool(width, heads)
        self.head = nn.Sequential(nn.LayerNorm(width), mlp([width, 2 * width, out]))

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        ents, goals = obs["observation"].float(), obs["desired_goal"].float()
        mask, goal_mask = ents[..., ENTITY_PRESENT] > 0.5, goals[..., GOAL_PRESENT] > 0.5
        x, g = ents * ENTITY_SCALE, goals * GOAL_SCALE
        if args.relative:
            agent = ents[:, :1, ENTITY_XY]
            x = torch.cat([x, 4 * (ents[..., ENTITY_XY] - agent)], -1)
            g = torch.cat([g, 4 * (goals[..., GOAL_XY] - agent)], -1)
        x, g = self.embed_entity(x), self.embed_goal(g)
        for block in self.before:
            x = block(x, mask=mask)
        x = self.cross(x, g, goal_mask)
        for block in self.after:
            x = block(x, mask=mask)
        return self.head(x[:, 0] if args.readout == "agent" else self.pool(x, mask))


out_dim = 2 if args.head == "mse" else 3 * K * K
if args.net == "eit":
    net: nn.Module = EntityNet(NetConfig(width=args.width, heads=args.heads, blocks=args.blocks), out_dim)
else:
    net = ProbeNet(args.width, args.heads, args.blocks, out_dim)
optimizer = torch.optim.Adam(net.parameters(), lr=LR)


def split_bins(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return y[:, : K * K], y[:, K * K :].reshape(-1, K * K, 2)


def action(obs: dict[str, torch.Tensor]) -> torch.Tensor:
    y = net(obs)
    if args.head == "mse":
        return torch.tanh(y)
    logits, offsets = split_bins(y)
    k = logits.argmax(-1)
    return (CENTRES[k] + offsets[torch.arange(len(k)), k] / (K - 1)).clamp(-1, 1)


def loss(obs: dict[str, torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    y = net(obs)
    if args.head == "mse":
        return ((torch.tanh(y) - target) ** 2).mean()
    logits, offsets = split_bins(y)
    k = ((target[:, None] - CENTRES[None]) ** 2).sum(-1).argmin(-1)
    residual = (target - CENTRES[k]) * (K - 1)
    return nn.functional.cross_entropy(logits, k) + ((offsets[torch.arange(len(k)), k] - residual) ** 2).mean()


class Acting(nn.Module):
    """The network as an actor module (``forward`` → its action), for the library's ``_Actor`` and ``_Labelled``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = net  # its parameters tell _Actor the device

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return action(obs)


actor = _Actor(Acting())


rng = np.random.default_rng(0)


def clone(demos, steps: int, every: int = 0, cosine: bool = False) -> float:
    """``steps`` cloning steps; every ``every`` steps log the loss and success at N = 3; optionally a cosine learning rate."""
    net.train()
    losses = []
    for step in range(1, steps + 1):
        if cosine:
            for group in optimizer.param_groups:
                group["lr"] = LR * 0.5 * (1 + np.cos(np.pi * step / steps))
        obs, target = demos.batch(rng.integers(len(demos), size=args.batch), "cpu")
        value = loss(obs, target)
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
        losses.append(value.item())
        if every and step % every == 0 and step < steps:
            net.eval()
            log.append(dict(round=0, step=step, loss=float(np.mean(losses[-200:])), success_3=success(3)))
            log[-1]["wall_s"] = time.time() - start
            print(log[-1], flush=True)
            net.train()
    net.eval()
    if cosine:
        for group in optimizer.param_groups:
            group["lr"] = LR
    return float(np.mean(losses[-200:]))


def success(n: int, episodes: int = 30, seed: int = 300_000) -> float:
    report = evaluate(actor, [n], split="colour_shape", parts=["train"], episodes=episodes, seed=seed, progress=False)
    return float(np.mean(report.results[0].success))


start = time.time()
demos = collect_demos(make_env, args.demos, seed=0, progress=False)
print("demos", len(demos), f"{time.time() - start:.0f}s", flush=True)
log = []
value = clone(demos, args.bc, args.eval_every, args.cosine)
log.append(
    dict(round=0, step=args.bc, transitions=len(demos), loss=value, success_3=success(3), wall_s=time.time() - start)
)
print(log[-1], flush=True)
for it in range(args.dagger):
    envs = [make_env() for _ in range(args.dagger_eps)]
    expert = ExpertPolicy(seeds=[1000 + 97 * it + i for i in range(args.dagger_eps)])
    policy = _Labelled(actor, expert)
    labels = _Labels(args.dagger_eps, expert, lambda policy=policy: policy.labels)
    rollout(envs, policy, [5_000_000 + 1000 * it + i for i in range(args.dagger_eps)], recorder=labels)
    demos = demos + labels.demos()
    value = clone(demos, args.dagger_steps)
    log.append(dict(round=it + 1, transitions=len(demos), loss=value, success_3=success(3), wall_s=time.time() - start))
    print(log[-1], flush=True)
final = {n: success(n, 50, 300_100) for n in (2, 3, 4, 6)}
# How well the network fits the expert on the expert's own states: 20 fresh episodes.
fresh = collect_demos(make_env, 20, seed=777, progress=False)
obs, target = fresh.batch(np.arange(len(fresh)), "cpu")
with torch.no_grad():
    predicted = action(obs)
    fit = {
        "transitions": len(fresh),
        "squared_error": ((predicted - target) ** 2).sum(-1).mean().item(),
        "target_squared_norm": (target**2).sum(-1).mean().item(),
    }
    if args.head == "bins":
        cell = lambda a: ((a[:, None] - CENTRES[None]) ** 2).sum(-1).argmin(-1)  # noqa: E731
        fit["cell_accuracy"] = (split_bins(net(obs))[0].argmax(-1) == cell(target)).float().mean().item()
print("fit on 20 fresh expert episodes", fit, flush=True)
print("final (50 episodes, seeds 300100+)", final, flush=True)
with open(args.out, "w") as f:
    json.dump(dict(args=vars(args), log=log, final=final, fit=fit, wall_s=time.time() - start), f, indent=1)
