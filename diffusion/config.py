"""The configuration of an ``ecrl-train-diffusion`` run: :class:`DiffusionTrainConfig`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from ecrl.diffusion.denoiser import DenoiserConfig
from ecrl.diffusion.hierarchical import HierarchicalPlanner
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.training import (
    ComputeOptions,
)


@dataclass
class DiffusionTrainConfig(ComputeOptions):
    """A diffusion-planner training run (every field is a command-line option of ``ecrl-train-diffusion``).

    The defaults are the recipe of ``results/diffusion_push3``: a small denoiser and many updates.
    """

    dataset: Path = Path("data/push3")
    """Demonstration dataset written by ``ecrl-collect``."""
    planner: Literal["flat", "hierarchical"] = "flat"
    """flat: one denoiser over horizon-step plans; hierarchical: subgoals every subgoal_every steps over dense segments."""
    encoder: Path | None = None
    """Plan from pixels: a frozen encoder (``ecrl-train-encoder`` run or checkpoint) whose entities of the dataset's camera frames replace the state entities (needs a pixel dataset; flat planner)."""
    goal_images: bool = False
    """Plan from pixels towards goal *images* (``--encoder``, a dataset collected with ``--goal-pixels``): the
    goal is the encoder's entities of the frames of the goal configuration, as ECRL and EC-Diffuser give it,
    instead of the goal rows (the targets' attributes and positions). The policy then reads
    ``obs["goal_pixels"]`` (envs made with ``goal_pixels=True``)."""
    table_frame: bool = False
    """Plan from pixels over table-frame keypoints (``--encoder``): each particle's image position is lifted
    to where its camera's ray meets the plane at an object's centre height (the cameras' calibration), the
    frame of the goal rows and of the other views' particles (:func:`ecrl.encoders.rows.lift_to_table`)."""
    plan_positions: bool = False
    """Plan from pixels (``--encoder``) over the particles' positions only: each row's keypoint position is
    its planned state, the rest of the row (scale, depth,
    transparency, visual latent, camera) static context read at step 0, as the state planner plans
    positions and reads attributes (``DenoiserConfig.planned``). Default: every feature is planned."""
    denoiser: DenoiserConfig = field(default_factory=DenoiserConfig)
    """The denoiser: its size, its noise schedule and (flat planner) its ``horizon``, the plan length in env
    steps. The hierarchical planner's two denoisers have this size with horizons ``subgoal_horizon``
    (high) and ``subgoal_every`` (low); ``entity_dim`` comes from ``--encoder``, ``action_dim`` and
    ``state`` from the dataset (``spatial`` for OGBench's cubes)."""
    hindsight: Literal["future", "placements"] = "future"
    """How play data (episodes without a goal of their own, e.g. OGBench's) gets each window's goal:
    ``future``, a later state of the episode drawn uniformly, as OGBench's goal-conditioned baselines
    draw their actors' goals; ``placements``, the scene after the next k cube placements, k geometric
    with mean 2 (:meth:`ecrl.datasets.DemoDataset.placement_goals`). Ignored for expert datasets."""
    recolour: bool = False
    """Give every object of every training window a random colour, its goal rows the same
    (:func:`ecrl.datasets.recolour_windows`): goals are matched to objects by colour, and a dataset of
    few colours (OGBench's cube-double: two) otherwise teaches only those."""
    placed_objects: int = 0
    """Add up to this many objects to every training window, each already at its goal and out of the
    demonstration's way (:func:`ecrl.datasets.add_placed_objects`), so that "every object placed"
    rather than "N placed" ends a task (0: none). On push it lifts the 3-object planner over every object
    from 35 to 39 of 50 at N = 6 and from 24 to 37 at N = 8 (train part, reporting seeds; 76 and 60 of
    100 on fresh seeds; ``results/diffusion_push3/placed``); on the
    Fetch arm it did worse than none (``results/fetch_pick_place2/README.md``)."""
    goal_dropout: float = 0.15
    """Fraction of training windows without their goal (flat planner), for classifier-free guidance."""
    guidance: float = 2.0
    """Classifier-free guidance weight on the goal when the flat planner acts (needs ``goal_dropout`` > 0 if not 1)."""
    sampling_steps: int = 5
    """DDIM steps (denoiser calls) per plan when acting (hierarchical: per segment)."""
    replan_every: int = 1
    """Actions executed from a plan (hierarchical: a segment) before re-planning."""
    fixed_noise: bool = False
    """Start every plan from the same noise (plans a deterministic function of the observation); by default each plan draws fresh noise, which solved more push-3 episodes (a planner stuck on a stand-still plan stays stuck with fixed noise)."""
    subgoal_every: int = 8
    """Hierarchical: K, env steps between subgoals (the length of a segment)."""
    subgoal_horizon: int = 8
    """Hierarchical: Hh, subgoals per high-level plan (which spans K·Hh env steps)."""
    subgoal_sampling_steps: int = 5
    """Hierarchical: DDIM steps per high-level plan."""
    subgoal_replan_every: int | None = None
    """Hierarchical: env steps between high-level plans (default: subgoal_every)."""
    subgoal_action_weight: float = 1.0
    """Hierarchical: weight of the high level's action term (mean action over each stride; an auxiliary target)."""
    init_from: Path | None = None
    """Start from the weights of a saved planner (a checkpoint directory, e.g. a committed ``policy/``) of the same kind and size, to train it further when its run directory is gone; a flat planner can also start both levels of a hierarchical one (same denoiser size; horizons may differ). A planner from pixels starts a planner from pixels (``--encoder``) with the same front end: the same encoder and weights, keypoint frame and row normalisation (the same dataset). The weights start both the model and its EMA, the optimizer and the learning-rate schedule start afresh."""
    steps: int = 120_000
    """Budget: gradient steps (the default takes about 45 minutes on one CPU core)."""
    batch_size: int = 128
    """Windows per gradient step (per level), over all processes: under torchrun with K processes each draws batch_size / K."""
    lr: float = 1e-3
    """Peak learning rate (AdamW), reached after ``warmup`` steps, then cosine decay to a tenth."""
    warmup: int = 500
    """Linear learning-rate warm-up steps."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    action_weight: float = 10.0
    """Weight of the action term of the loss (the state term has weight 1)."""
    ema_decay: float = 0.999
    """Decay of the EMA weights that are evaluated and saved."""
    seed: int = 0
    """Seed of the network initialisation, the window sampler and the diffusion noise."""
    eval_every: int = 10_000
    """Gradient steps between evaluations in the env (0: none)."""
    eval_objects: tuple[int, ...] = ()
    """Numbers of objects evaluated periodically (default: the dataset's largest N and twice it)."""
    eval_episodes: int = 20
    """Episodes per evaluated N."""
    eval_parts: tuple[str, ...] = ("train",)
    """Parts of the dataset's split evaluated periodically (when it has one)."""
    checkpoint_every: int = 2000
    """Gradient steps between checkpoints (0: only at the end)."""
    log_every: int = 100
    """Gradient steps between tensorboard scalars."""

    def __post_init__(self) -> None:
        super().__post_init__()
        problems = []
        for name in ("steps", "batch_size", "sampling_steps", "replan_every", "eval_episodes"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        horizon, diffusion_steps = self.denoiser.horizon, self.denoiser.diffusion_steps
        if self.planner not in ("flat", "hierarchical"):
            problems.append(f"planner must be 'flat' or 'hierarchical', got {self.planner!r}")
        elif self.planner == "flat" and self.replan_every > horizon:
            problems.append(f"replan_every ({self.replan_every}) must not exceed denoiser.horizon ({horizon})")
        elif self.planner == "hierarchical":
            problems += self._hierarchical_problems()
        if self.sampling_steps > diffusion_steps:
            problems.append(
                f"sampling_steps ({self.sampling_steps}) exceeds denoiser.diffusion_steps ({diffusion_steps})"
            )
        if self.denoiser.entity_dim:
            problems.append("denoiser.entity_dim is set by the encoder (--encoder), not by hand")
        if self.encoder is not None and self.denoiser.state != "planar":
            problems.append("planning from pixels (--encoder) plans the encoder's entities, not a spatial state")
        if not 0 <= self.goal_dropout < 1:
            problems.append(f"goal_dropout must be in [0, 1), got {self.goal_dropout}")
        if self.guidance != 1.0 and self.goal_dropout == 0:
            problems.append("guidance != 1 needs a model trained with goal_dropout > 0")
        if not 0 < self.ema_decay < 1:
            problems.append(f"ema_decay must be in (0, 1), got {self.ema_decay}")
        if self.lr <= 0:
            problems.append(f"lr must be > 0, got {self.lr}")
        if self.encoder is not None and self.planner != "flat":
            problems.append("planning from pixels (--encoder) is implemented for the flat planner only")
        if self.hindsight not in ("future", "placements"):
            problems.append(f"hindsight must be 'future' or 'placements', got {self.hindsight!r}")
        if self.placed_objects < 0:
            problems.append(f"placed_objects must be >= 0, got {self.placed_objects}")
        if self.placed_objects and (self.encoder is not None or self.planner != "flat"):
            problems.append("placed_objects is implemented for the flat state planner (no --encoder)")
        if self.recolour and self.encoder is not None:
            problems.append("recolour is implemented for state planners (no --encoder)")
        if self.table_frame and self.encoder is None:
            problems.append("table_frame lifts an encoder's keypoints: it needs --encoder")
        if self.plan_positions and self.encoder is None:
            problems.append("plan_positions plans an encoder's keypoint positions: it needs --encoder")
        if self.goal_images and self.encoder is None:
            problems.append("goal_images plans from pixels towards goal images: it needs --encoder")
        if problems:
            raise ValueError("invalid diffusion training config: " + "; ".join(problems))

    def for_dataset(self, meta: dict) -> DiffusionTrainConfig:
        """This config fitted to a dataset's ``meta.json``: the denoiser's ``action_dim`` is the dataset's,
        and its ``state`` is ``spatial`` for OGBench's cubes and the Fetch arm (lifted and stacked), else ``planar``."""
        env = meta["collections"][0]["config"].get("env", "push") if meta.get("collections") else "push"
        state = "spatial" if env in ("ogbench-cube", "fetch") else "planar"
        return replace(self, denoiser=replace(self.denoiser, action_dim=int(meta["action_dim"]), state=state))

    def _hierarchical_problems(self) -> list[str]:
        k, hh = self.subgoal_every, self.subgoal_horizon
        problems = [
            f"{name} must be >= {low}, got {getattr(self, name)}"
            for name, low in (("subgoal_every", 1), ("subgoal_horizon", 2), ("subgoal_sampling_steps", 1))
            if getattr(self, name) < low
        ]
        if self.replan_every > k:
            problems.append(f"replan_every ({self.replan_every}) must not exceed subgoal_every ({k})")
        if self.subgoal_sampling_steps > self.denoiser.diffusion_steps:
            problems.append(
                f"subgoal_sampling_steps ({self.subgoal_sampling_steps}) exceeds "
                f"denoiser.diffusion_steps ({self.denoiser.diffusion_steps})"
            )
        every = self.subgoal_replan_every
        if every is not None and not 1 <= every <= k * (hh - 1) + 1:
            problems.append(f"subgoal_replan_every must be in [1, K·(Hh − 1) + 1 = {k * (hh - 1) + 1}], got {every}")
        if self.subgoal_action_weight < 0:
            problems.append(f"subgoal_action_weight must be >= 0, got {self.subgoal_action_weight}")
        return problems

    @property
    def subgoal_denoiser(self) -> DenoiserConfig:
        """The hierarchical planner's high level: ``subgoal_horizon`` jumps."""
        return replace(self.denoiser, horizon=self.subgoal_horizon)

    @property
    def segment_denoiser(self) -> DenoiserConfig:
        """The hierarchical planner's low level: ``subgoal_every`` steps, the last one given."""
        return replace(self.denoiser, horizon=self.subgoal_every)

    def make_planner(
        self, entity_dim: int = 0, goal_dim: int = 0, planned: tuple[int, ...] = ()
    ) -> DiffusionPlanner | HierarchicalPlanner:
        """A fresh (untrained) planner of this run's kind and size (``entity_dim``, ``goal_dim``, ``planned``:
        generic rows, see :class:`DenoiserConfig`)."""
        if self.planner == "flat":
            denoiser = replace(self.denoiser, entity_dim=entity_dim, goal_dim=goal_dim, planned=list(planned))
            return DiffusionPlanner(
                denoiser, self.sampling_steps, self.replan_every, fixed_noise=self.fixed_noise, guidance=self.guidance
            )
        return HierarchicalPlanner(
            self.subgoal_denoiser,
            self.segment_denoiser,
            high_sampling_steps=self.subgoal_sampling_steps,
            low_sampling_steps=self.sampling_steps,
            replan_every=self.replan_every,
            high_replan_every=self.subgoal_replan_every,
            fixed_noise=self.fixed_noise,
        )
