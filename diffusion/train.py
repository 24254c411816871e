"""Training a diffusion planner on a demonstration dataset (``ecrl-train-diffusion``).

Two planners: ``flat`` (:class:`~ecrl.diffusion.planner.DiffusionPlanner`, one denoiser over
``denoiser.horizon``-step windows) and ``hierarchical`` (:class:`~ecrl.diffusion.hierarchical.HierarchicalPlanner`:
a subgoal denoiser over ``subgoal_horizon`` states ``subgoal_every`` steps apart and a segment
denoiser over ``subgoal_every``-step windows whose last state is given). The hierarchical run trains
both in one loop: every gradient step draws one batch for each level, sums the two losses, clips
each denoiser's gradients on its own and steps one AdamW over both (AdamW is per parameter, so this
is two optimizers in one); each denoiser has its own EMA.

A run directory ``runs/<dataset>__<diffusion|hdiffusion>__<seed>__<time>/`` holds ``config.json``,
``provenance.json``, ``tb/`` (tensorboard: ``train/loss``, ``train/state_loss``,
``train/action_loss`` — per level ``train/high/…`` and ``train/low/…`` for the hierarchical
planner —, ``train/lr``, ``time/windows_per_s``, and ``eval/<part>/n<N>/…`` from the periodic
evaluation), ``checkpoints/latest/`` (the EMA planner as an ``ecrl.load``-able policy, plus
``training.safetensors`` + ``training.json``: weights, EMA weights, optimizer, step counter and
the window sampler's state), ``final/`` (the EMA planner) and ``sessions.jsonl`` (one line per
start or resume). ``--resume RUN`` continues a killed run from its last checkpoint.

Under ``torchrun --nproc-per-node K`` the run is data-parallel (:mod:`ecrl.distributed`):
``batch_size`` stays the global batch, each process draws ``batch_size / K`` windows per level from
its own samplers (rank 0's seeded as a single process's), DDP averages the gradients, every process
updates the same EMA, and rank 0 alone logs (the losses averaged over the processes), evaluates and
saves (with every rank's sampler state, so ``--resume`` under torchrun continues each of them).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm

from ecrl import distributed
from ecrl.checkpoint import load_optimizer_state, optimizer_state, replace_dir
from ecrl.datasets import DemoDataset, add_placed_objects, read_meta, recolour_windows
from ecrl.diffusion.config import DiffusionTrainConfig
from ecrl.diffusion.ema import EMA
from ecrl.diffusion.hierarchical import HierarchicalPlanner, segment_windows, subgoal_windows
from ecrl.diffusion.noise import LossTerms, loss
from ecrl.diffusion.pixels import LatentWindows, PixelPlanner
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.diffusion.warm_start import init_from, planner_denoisers
from ecrl.distributed import World
from ecrl.encoders import load_encoder
from ecrl.encoders.rows import OBJECT_CENTRE, FrameRows, position_columns
from ecrl.eval_configs import resolve_skill
from ecrl.eval_report import log_tensorboard, scalars
from ecrl.evaluation import evaluate
from ecrl.policy import Policy
from ecrl.training import (
    Run,
    WindowLog,
    append_csv,
    autocast,
    close_run,
    compiled,
    open_run,
    start_run,
    torch_device,
    warmup_cosine,
)

__all__ = ["DiffusionTrainConfig", "DiffusionTrainResult", "planner_policy", "train"]


@dataclass
class DiffusionTrainResult:
    """What a run did: where it lives, how far it got, its last losses and evaluation."""

    run_dir: Path
    steps: int
    wall_s: float
    loss: float = math.nan
    windows_per_s: float = math.nan
    eval: dict[str, float] = field(default_factory=dict)


def _dataset_task(path: Path) -> dict[str, Any]:
    """The task settings of a dataset's first collection: env, skill (the Fetch arm's), goal, split, numbers of objects."""
    config = read_meta(path)["collections"][0]["config"]
    env = config.get("env", "push")
    task = {"env": env, "goal": config["goal"], "split": config["split"], "n_objects": list(config["n_objects"])}
    skill = resolve_skill(env, config.get("skill"))
    return task | ({"skill": skill} if skill else {})


def planner_policy(planner: DiffusionPlanner | HierarchicalPlanner, meta: dict[str, Any]) -> Policy:
    """``planner`` behind :class:`~ecrl.policy.Policy` (actions are already in ``[-1, 1]``)."""
    if isinstance(planner, HierarchicalPlanner):
        builder, action_dim = "hierarchical_planner", planner.action_dim
    else:
        builder, action_dim = "diffusion_planner", planner.denoiser.config.action_dim
    ones = np.ones(action_dim, dtype=np.float32)
    return Policy(planner, -ones, ones, meta, builder, planner.kwargs)


def planned_columns(encoder) -> tuple[int, ...]:
    """``--plan-positions``: the columns of the rows a planner from pixels plans, the keypoint's position."""
    position = position_columns(encoder)
    return tuple(range(position.start, position.stop))


class _Trainer:
    """The state of a run: planner (whose denoisers are trained), their EMA copies, optimizer, step, samplers.

    In a process of a data-parallel run (``world``), ``forward`` holds the denoisers behind DDP (and
    ``torch.compile`` with ``config.compile``); ``models`` are the plain modules, saved and averaged.
    """

    def __init__(
        self,
        config: DiffusionTrainConfig,
        device: torch.device,
        pixels: tuple | None = None,
        world: World | None = None,
    ) -> None:
        torch.manual_seed(config.seed)
        world = world or World()
        self.config, self.device = config, device
        # Planning from pixels: (frozen encoder, LatentWindows, {"size", "cameras"}); None for state entities.
        self.pixels = pixels
        self.entity_dim = pixels[1].width if pixels else 0
        self.goal_dim = self.entity_dim if config.goal_images else 0
        self.planned = planned_columns(pixels[0]) if pixels and config.plan_positions else ()
        self.planner = config.make_planner(self.entity_dim, self.goal_dim, self.planned).to(device)
        self.models = planner_denoisers(self.planner)
        if config.init_from is not None:
            init_from(self.models, config.init_from, device, self.front_end())
        self.emas = {name: EMA(model, config.ema_decay) for name, model in self.models.items()}
        # The null goal token is trained only with goal dropout (never by the hierarchical planner).
        unused = config.planner == "hierarchical" or config.goal_dropout == 0
        replicas = {name: distributed.replicate(m, world, find_unused=unused) for name, m in self.models.items()}
        self.forward = {name: compiled(m, config.compile) for name, m in replicas.items()}
        parameters = [p for model in self.models.values() for p in model.parameters()]
        self.optimizer = torch.optim.AdamW(parameters, lr=config.lr, weight_decay=config.weight_decay)
        self.step, self.batch_size = 0, distributed.split_batch(config.batch_size, world)
        self.rng = np.random.default_rng(distributed.rank_seed(config.seed, world.rank))
        self.generator = torch.Generator(device).manual_seed(distributed.rank_seed(config.seed, world.rank))

    def ema_planner(self) -> DiffusionPlanner | HierarchicalPlanner:
        planner = self.config.make_planner(self.entity_dim, self.goal_dim, self.planned)
        for name, model in planner_denoisers(planner).items():
            model.load_state_dict(self.emas[name].model.state_dict())
        return planner.to(self.device).eval()

    def _front_end_kwargs(self) -> dict[str, Any]:
        """Planning from pixels: the :class:`FrameRows` arguments of the run's frozen front end."""
        encoder, windows, frames = self.pixels
        table = {"table_height": OBJECT_CENTRE, "cameras": frames["cameras"]} if self.config.table_frame else {}
        kind = {"kind": encoder.kind, "config": encoder.config_dict()}
        return {"encoder": kind, "mean": windows.mean.tolist(), "std": windows.std.tolist(), **table}

    def front_end(self) -> FrameRows | None:
        """The run's frozen front end as its policies carry it (``None`` for state entities)."""
        if not self.pixels:
            return None
        rows = FrameRows(**self._front_end_kwargs())
        rows.encoder.load_state_dict(self.pixels[0].state_dict())
        return rows

    def policy(self, meta: dict[str, Any]) -> Policy:
        """The EMA planner as a policy (behind the frozen encoder when planning from pixels)."""
        if not self.pixels:
            return planner_policy(self.ema_planner(), meta)
        encoder, _, frames = self.pixels
        planner = self.ema_planner()
        module = PixelPlanner(planner=planner.kwargs, goal_images=self.config.goal_images, **self._front_end_kwargs())
        module.encoder.load_state_dict(encoder.state_dict())
        module.planner.load_state_dict(planner.state_dict())
        ones = np.ones(planner.denoiser.config.action_dim, dtype=np.float32)
        module = module.to(self.device).eval()
        return Policy(module, -ones, ones, dict(meta, pixels=frames), "pixel_planner", module.kwargs)

    def losses(self, dataset: DemoDataset | LatentWindows) -> dict[str, LossTerms]:
        """One batch's loss terms per denoiser (``""`` flat; ``"high"`` and ``"low"`` hierarchical)."""
        config, rng, batch_size, models = self.config, self.rng, self.batch_size, self.forward
        # Play data has no goal per episode: every window's goal is a state it reached later.
        hindsight = {"hindsight": config.hindsight} if getattr(dataset, "play", False) else {}

        def windows(horizon: int) -> dict[str, np.ndarray]:
            """Dense windows, augmented before any hierarchical re-cutting (which drops achieved goals)."""
            batch = dataset.sample_windows(batch_size, horizon, rng, **hindsight)
            batch = add_placed_objects(batch, rng, config.placed_objects) if config.placed_objects else batch
            return recolour_windows(batch, rng) if config.recolour else batch

        def tensors(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
            return {k: torch.as_tensor(np.ascontiguousarray(v), device=self.device) for k, v in batch.items()}

        if config.planner == "flat":
            batch = tensors(windows(config.denoiser.horizon))
            return {"": loss(models[""], batch, self.generator, config.action_weight, goal_dropout=config.goal_dropout)}
        k, hh = config.subgoal_every, config.subgoal_horizon
        high = subgoal_windows(windows(k * hh), k, dataset.success)
        low = segment_windows(windows(k), dataset.success)
        return {
            "high": loss(models["high"], tensors(high), self.generator, config.subgoal_action_weight),
            "low": loss(models["low"], tensors(low), self.generator, config.action_weight, given_last=True),
        }

    def update(self, source: DemoDataset | LatentWindows) -> dict[str, LossTerms]:
        """One gradient step: learning rate, loss, clipped gradients, AdamW, EMA; returns its loss terms."""
        config = self.config
        for group in self.optimizer.param_groups:
            group["lr"] = config.lr * warmup_cosine(self.step, config.warmup, config.steps)
        with autocast(config.precision, self.device):
            terms = self.losses(source)
        self.optimizer.zero_grad(set_to_none=True)
        sum(t.total for t in terms.values()).backward()
        for model in self.models.values():
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        self.optimizer.step()
        for name, model in self.models.items():
            self.emas[name].update(model)
        self.step += 1
        return terms

    @staticmethod
    def _prefix(kind: str, name: str) -> str:
        return f"{kind}.{name}." if name else f"{kind}."

    def save(self, run_dir: Path, meta: dict[str, Any]) -> Path | None:
        """Write ``checkpoints/latest`` (on rank 0; every process calls it, to hand over its samplers)."""
        samplers = distributed.sampler_checkpoint(self.rng, self.generator.get_state(), "generator")
        if samplers is None:
            return None
        root = run_dir / "checkpoints"
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".tmp_{self.step}"
        shutil.rmtree(tmp, ignore_errors=True)
        self.policy(meta).save(tmp)
        tensors: dict[str, torch.Tensor] = {}
        for name, model in self.models.items():
            for kind, state in (("model", model.state_dict()), ("ema", self.emas[name].state_dict())):
                prefix = self._prefix(kind, name)
                tensors |= {prefix + k: v.detach().cpu().contiguous() for k, v in state.items()}
        opt_tensors, opt_meta = optimizer_state(self.optimizer, "opt")
        tensors |= opt_tensors
        tensors["generator"] = self.generator.get_state()
        save_file(tensors | samplers[0], str(tmp / "training.safetensors"))
        state = {"step": self.step, "optimizer": opt_meta, "rng": self.rng.bit_generator.state, **samplers[1]}
        (tmp / "training.json").write_text(json.dumps(state, indent=1) + "\n")
        return replace_dir(tmp, root / "latest")

    def load(self, ckpt: Path) -> None:
        if not (ckpt / "training.json").exists():
            raise FileNotFoundError(f"{ckpt} has no training state (training.json); cannot resume from it")
        state = json.loads((ckpt / "training.json").read_text())
        tensors = load_file(str(ckpt / "training.safetensors"))
        for name, model in self.models.items():
            for kind, target in (("model", model), ("ema", self.emas[name])):
                prefix = self._prefix(kind, name)
                target.load_state_dict({k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)})
        load_optimizer_state(self.optimizer, tensors, state["optimizer"], "opt")
        sampler = distributed.restore_sampler(self.rng, state, tensors, "generator", self.config.seed)
        if isinstance(sampler, int):
            self.generator.manual_seed(sampler)
        else:
            self.generator.set_state(sampler)
        self.step = int(state["step"])


def _evaluate(trainer: _Trainer, task: dict[str, Any], writer: SummaryWriter, run_dir: Path) -> dict[str, float]:
    """Periodic evaluation: tensorboard scalars plus a row of ``tb/progress.csv`` (for ``ecrl-eval``'s learning curve)."""
    config = trainer.config
    n_train = max(task["n_objects"])
    objects = list(config.eval_objects or (n_train, 2 * n_train))
    policy = trainer.policy({"env": task["env"]})
    if task["env"] == "ogbench-cube":  # OGBench's five evaluation tasks per size
        report = evaluate(policy, objects, env=task["env"], episodes=config.eval_episodes, progress=False)
    else:
        report = evaluate(
            policy,
            objects,
            env=task["env"],
            skill=task.get("skill"),
            goal=task["goal"],
            split=task["split"],
            parts=config.eval_parts if task["split"] else ("train",),
            episodes=config.eval_episodes,
            progress=False,
        )
    log_tensorboard(report, writer, trainer.step)
    row = {"train/gradient_steps": trainer.step, **scalars(report)}
    append_csv(run_dir / "tb" / "progress.csv", row)
    return {f"{r.part}/n{r.n_objects}": float(np.mean(r.success)) for r in report.results}


def _scalars(terms: dict[str, LossTerms]) -> dict[str, torch.Tensor]:
    """Tensorboard scalars of one step's losses, left on the device: ``train/loss`` (the sum, in float64
    as the Python sum of the levels' floats was), and each part per level."""
    totals = [t.total.detach() for t in terms.values()]
    scalars = {"train/loss": torch.stack(totals).double().sum()}
    for (name, t), total in zip(terms.items(), totals, strict=True):
        level = f"train/{name}/" if name else "train/"
        if name:
            scalars[level + "loss"] = total
        scalars |= {level + "state_loss": t.states, level + "action_loss": t.actions}
    return scalars


def _run_meta(config: DiffusionTrainConfig, demonstrations: int, task: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint of this run records about it (the planner's ``meta``)."""
    meta = {
        "arch": "diffusion" if config.planner == "flat" else "hierarchical_diffusion",
        "env": task["env"],
        **({"skill": task["skill"]} if "skill" in task else {}),
        "dataset": str(config.dataset),
        "demonstrations": demonstrations,
        "train_n_objects": task["n_objects"],
        "goal": task["goal"],
        "split": task["split"],
        "sampling_steps": config.sampling_steps,
        "replan_every": config.replan_every,
    }
    if config.planner == "flat":
        meta["horizon"] = config.denoiser.horizon
    else:
        meta |= {
            "subgoal_every": config.subgoal_every,
            "subgoal_horizon": config.subgoal_horizon,
            "subgoal_sampling_steps": config.subgoal_sampling_steps,
            "subgoal_replan_every": config.subgoal_replan_every or config.subgoal_every,
        }
    if config.encoder is not None:
        meta |= {
            "arch": "diffusion_from_pixels",
            "encoder": str(config.encoder),
            # the task's goal kind stays in "goal" (ecrl-eval and the benches read it); this says how it is given
            "goal_input": "images" if config.goal_images else "rows",
            **({"keypoints": "table"} if config.table_frame else {}),
            **({"planned": "positions"} if config.plan_positions else {}),
        }
    return meta


def train(
    config: DiffusionTrainConfig, resume: Path | None = None, session: Mapping[str, Any] | None = None
) -> DiffusionTrainResult:
    """Train (or, with ``resume``, continue) a diffusion planner; returns what the run did.

    With ``resume`` (a run directory) the run's own ``config.json`` is used, except for ``steps``,
    which may be raised to extend a finished run, and how it runs (``threads``, ``device``,
    ``progress``, ``precision``, ``compile``). Under ``torchrun`` every process calls it and trains
    its share of each batch (see the module's docstring). ``session`` is logged with each session in
    ``sessions.jsonl`` (`ecrl-train-diffusion`'s final-evaluation settings).
    """
    algo = lambda c: "diffusion" if c.planner == "flat" else "hdiffusion"  # noqa: E731
    if resume is None:
        config = config.for_dataset(read_meta(config.dataset))
    stem = lambda c: f"{c.dataset.name}__{algo(c)}"  # noqa: E731
    run = start_run(DiffusionTrainConfig, config, resume, "a diffusion", stem, record=session)
    with distributed.session(torch_device(run.config.device)) as (world, device):
        run.dir = distributed.broadcast(run.dir)  # a new run's name has the time in it: rank 0's
        return _train(run, world, device)


def _entities(
    config: DiffusionTrainConfig, dataset: DemoDataset, device: torch.device, progress: bool = False
) -> tuple[DemoDataset | LatentWindows, tuple | None]:
    """The windows a run trains on, and its ``pixels`` for :class:`_Trainer`: the dataset's state rows and
    ``None``, or (with ``config.encoder``) the frozen encoder's rows of its frames and (encoder, windows, frames)."""
    if config.encoder is None:
        return dataset, None
    encoder = load_encoder(config.encoder, device)
    source = LatentWindows(
        dataset,
        encoder,
        device,
        progress=progress,
        goal_images=config.goal_images,
        table_height=OBJECT_CENTRE if config.table_frame else None,
    )
    frames = {"size": int(dataset.pixel_meta["size"]), "cameras": list(dataset.cameras)}
    return source, (encoder, source, frames | ({"goal": True} if config.goal_images else {}))


def _train(run: Run, world: World, device: torch.device) -> DiffusionTrainResult:
    config, main = run.config, world.main
    dataset = DemoDataset(config.dataset)
    if len(dataset) == 0:
        raise ValueError(f"dataset {config.dataset} holds no episodes")
    task = _dataset_task(config.dataset)
    source, pixels = _entities(config, dataset, device, progress=config.progress and main)
    trainer = _Trainer(config, device, pixels, world)
    if run.resumed:
        trainer.load(run.checkpoint)
    meta = _run_meta(config, len(dataset), task)
    writer = None
    if main:
        open_run(run, trainer.step, **world.describe(config.batch_size))
        writer = SummaryWriter(str(run.dir / "tb"))
    result = DiffusionTrainResult(run_dir=run.dir, steps=trainer.step, wall_s=0.0)
    start, log = time.perf_counter(), WindowLog(writer, "time/windows_per_s")
    bar = tqdm(
        total=config.steps, initial=trainer.step, desc="diffusion", unit="step", disable=not (config.progress and main)
    )
    for model in trainer.models.values():
        model.train()
    while trainer.step < config.steps:
        terms = trainer.update(source)
        log.add(_scalars(terms))
        bar.update(1)
        if trainer.step % config.log_every == 0 or trainer.step == config.steps:
            lr = trainer.optimizer.param_groups[0]["lr"]
            means, result.windows_per_s = log.flush(trainer.step, lr, config.batch_size * len(terms))
            shown = [k for k in means if k.endswith("/loss") or k == "train/action_loss"]
            bar.set_postfix({k.removeprefix("train/"): f"{means[k]:.4f}" for k in shown})
            result.loss = means["train/loss"]
        if config.eval_every and (trainer.step % config.eval_every == 0 or trainer.step == config.steps):
            if main:
                result.eval = _evaluate(trainer, task, writer, run.dir)
                bar.write(f"step {trainer.step}: success " + ", ".join(f"{k} {v:.2f}" for k, v in result.eval.items()))
                for model in trainer.models.values():
                    model.train()
            log.restart()
        if config.checkpoint_every and trainer.step % config.checkpoint_every == 0:
            trainer.save(run.dir, dict(meta, steps=trainer.step))
    bar.close()
    trainer.save(run.dir, dict(meta, steps=trainer.step))
    if main:
        trainer.policy(dict(meta, steps=trainer.step)).save(run.dir / "final")
        writer.close()
    result.steps, result.wall_s = trainer.step, time.perf_counter() - start
    if main:
        close_run(run, trainer.step, result.wall_s, windows_per_s=result.windows_per_s)
    return result
