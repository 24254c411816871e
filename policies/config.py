"""The configuration of an ``ecrl-train`` run (RL, with optional demonstrations, BC and DAgger): :class:`TrainConfig`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import ecrl.envs  # noqa: F401  (registers ecrl/Push*)
from ecrl.envs.task import default_horizon
from ecrl.policies.nets import NetConfig
from ecrl.training import RunOptions


@dataclass
class TrainConfig(RunOptions):
    """An RL training run (every field is a command-line option of ``ecrl-train``).

    The defaults are the recipe of ``results/rl_push1``: TD3 + HER with the EIT; 200 scripted-expert
    episodes seed the replay buffer; the actor is behaviour-cloned on them and improved by 12 DAgger
    rounds; the critic alone learns for the first 10k env steps; then RL with the actor at a tenth of
    the critic's learning rate and a BC term anchoring it to the expert's actions.
    ``--demos 0 --bc-steps 0 --dagger-iterations 0 --bc-weight 0 --actor-warmup 0 --actor-lr-scale 1``
    is plain RL.
    """

    n_objects: int = 1
    """Objects per training episode."""
    goal: str = "positions"
    """Goal kind: positions, adjacent, sort or ordered."""
    split: str | None = None
    """Compositional split (e.g. ``colour_shape``): train on its ``train`` part only; ``None``: all combinations."""
    reward: Literal["sparse", "dense"] = "sparse"
    """Training reward: sparse (minus the fraction of objects not placed) or dense (minus the mean object-goal distance)."""
    n_max: int | None = None
    """Observation padding (default: ``n_objects``). Entity-centric models do not depend on it."""
    algo: Literal["sac", "td3", "tqc"] = "td3"
    """RL algorithm (SB3 SAC/TD3, sb3-contrib TQC), always with HER."""
    arch: Literal["eit", "deepsets", "mlp"] = "eit"
    """Actor/critic: Entity Interaction Transformer, DeepSets, or SB3's flat MLP (fixed N)."""
    net: NetConfig = field(default_factory=NetConfig)
    """Size of the entity-centric actor and critics (``eit``/``deepsets``; its ``arch`` follows ``--arch``)."""
    encoder: Path | None = None
    """Act from pixels: a frozen encoder (``ecrl-train-encoder`` run or checkpoint). The envs render its cameras
    at its image size, and the actor and critics read its entities of the frames
    (:class:`ecrl.encoders.rows.EncodedObservation`) instead of the state rows; the expert, HER and the
    reward still use the state. The policy acts from ``obs["pixels"]``."""
    net_arch: tuple[int, ...] = (256, 256)
    """Hidden layers of the flat MLP baseline (SB3's default for SAC)."""
    steps: int = 30_000
    """Budget: environment steps (over all parallel envs)."""
    seed: int = 0
    """Seed of the networks, the envs and the demonstrations."""
    n_envs: int = 1
    """Parallel environments (``SubprocVecEnv`` when > 1 and ``subproc``)."""
    subproc: bool = True
    """Run parallel environments in subprocesses (else in-process, ``DummyVecEnv``)."""
    lr: float = 1e-3
    """Learning rate of the critic (and of the actor, times ``actor_lr_scale``)."""
    actor_lr_scale: float = 0.1
    """The actor's learning rate as a fraction of ``lr`` (below 1: RL moves a pre-trained actor slowly)."""
    batch_size: int = 256
    """Minibatch size of each gradient step."""
    buffer_size: int | None = None
    """Replay buffer capacity (default: ``steps`` + the demonstrations)."""
    gamma: float = 0.95
    """Discount factor."""
    tau: float = 0.05
    """Target network Polyak coefficient."""
    learning_starts: int | None = None
    """Env steps (over all parallel envs) before the first update (default: one episode per env, the minimum HER allows)."""
    update_every: int = 2
    """Env steps (per env) between training phases."""
    utd: float = 0.5
    """Gradient steps per environment step (update-to-data ratio)."""
    her_k: int = 4
    """HER relabelled goals per real one (``future`` strategy)."""
    action_noise: float = 0.1
    """TD3 Gaussian exploration noise (std, in units of the action bound)."""
    demos: int = 200
    """Scripted-expert episodes added to the replay buffer before training (0: none); rounded up to a multiple of ``n_envs``."""
    bc_steps: int = 3000
    """Behaviour-cloning steps pre-training the actor on the demonstrations."""
    dagger_iterations: int = 12
    """DAgger rounds after behaviour cloning: run the actor, label its states with the expert, clone again."""
    dagger_episodes: int = 30
    """Episodes the actor runs per DAgger round."""
    dagger_steps: int = 1500
    """Behaviour-cloning steps per DAgger round."""
    bc_weight: float = 2.0
    """Weight of the behaviour-cloning term during RL (0: off)."""
    bc_every: int = 2
    """Env steps between behaviour-cloning updates during RL."""
    actor_warmup: int = 10_000
    """Env steps at the start during which only the critic learns (the actor stays as pre-trained)."""
    eval_every: int = 5000
    """Env steps between evaluations (0: none)."""
    eval_objects: tuple[int, ...] = ()
    """Numbers of objects evaluated periodically (default: training N and twice it)."""
    eval_episodes: int = 30
    """Episodes per evaluated N."""
    checkpoint_every: int = 10_000
    """Env steps between checkpoints (0: only at the end); in the imitation stage, behaviour-cloning steps between
    its checkpoints (also written after the demonstrations and each DAgger round's rollouts; 0: none)."""
    keep_checkpoints: bool = False
    """Keep every ``checkpoints/step_<k>/`` policy, not only ``latest``."""
    save_replay: bool = True
    """Save the replay buffer with each checkpoint (needed for a faithful ``--resume``)."""

    def __post_init__(self) -> None:
        problems = []
        if self.arch != "mlp" and self.net.arch != self.arch:
            # The network's architecture is chosen by --arch (which also offers the flat MLP); a net
            # config left at its default follows it, one that names another architecture contradicts it.
            if self.net.arch != NetConfig.arch:
                problems.append(f"net.arch ({self.net.arch!r}) differs from arch ({self.arch!r}): set --arch only")
            else:
                self.net = replace(self.net, arch=self.arch)
        if self.n_objects < 1:
            problems.append(f"n_objects must be >= 1, got {self.n_objects}")
        if self.steps < 1:
            problems.append(f"steps must be >= 1, got {self.steps}")
        if self.n_envs < 1:
            problems.append(f"n_envs must be >= 1, got {self.n_envs}")
        if not 0 < self.actor_lr_scale <= 1:
            problems.append(f"actor_lr_scale must be in (0, 1], got {self.actor_lr_scale}")
        if not 0 < self.utd <= 16:
            problems.append(f"utd must be in (0, 16], got {self.utd}")
        if self.encoder is not None and self.arch == "mlp":
            problems.append(
                "--encoder feeds an encoder's entities to an entity-centric network: use --arch eit or deepsets"
            )
        if self.bc_weight > 0 and self.demos == 0:
            problems.append("bc_weight > 0 needs demonstrations (--demos N)")
        if (self.bc_steps > 0 or self.dagger_iterations > 0) and self.demos == 0:
            problems.append("bc_steps > 0 or dagger_iterations > 0 needs demonstrations (--demos N)")
        if problems:
            raise ValueError("invalid training config: " + "; ".join(problems))

    @property
    def task(self) -> str:
        split = f"-{self.split}" if self.split else ""
        return f"push{self.n_objects}-{self.goal}{split}-{self.arch}"

    @property
    def horizon(self) -> int:
        return default_horizon(self.n_objects)

    @property
    def demo_episodes(self) -> int:
        """The expert episodes seeding the replay buffer: ``demos`` rounded up to a multiple of ``n_envs``, so
        that every env's slot of the HER buffer holds whole episodes (see :func:`collect_demos`)."""
        return -(-self.demos // self.n_envs) * self.n_envs

    def env_kwargs(self, part: str = "train") -> dict[str, Any]:
        kw: dict[str, Any] = {
            "n_objects": self.n_objects,
            "goal": self.goal,
            "n_max": self.n_max,
            "reward_type": self.reward,
        }
        if self.split:
            kw.update(split=self.split, part=part)
        return kw
