"""RL training runs: SB3 SAC/TD3/TQC + HER with entity-centric (or flat MLP) actor-critics.

A run lives in ``runs/<task>__<algo>__<seed>__<time>/``:

- ``config.json``: the :class:`TrainConfig` it was started with;
- ``tb/``: tensorboard events (SB3's ``rollout/``, ``train/``, ``time/`` keys, periodic ``eval/``)
  and ``progress.csv``; before RL, the imitation stage's ``imitation/bc_loss`` and
  ``time/bc_steps_per_s``, at cloning steps counted over BC and every DAgger round;
- ``checkpoints/latest/`` (and ``checkpoints/step_<k>/`` if ``keep_checkpoints``): the inference
  policy (``policy.safetensors`` + ``policy.json``, for :func:`ecrl.load`) and the full training
  state (``training.safetensors`` with every network and optimizer, ``training.json``,
  ``replay.npz``), all loadable without pickle; ``--resume RUN_DIR`` continues from it;
- ``final/``: the policy at the end of training; ``imitation/``: the policy after behaviour cloning
  and DAgger, before any RL update (when those are on), with the demonstrations they grew
  (``demos.npz``); ``eval/``: evaluations.

A checkpoint is also written just before RL starts, so a run killed during RL never repeats its
demonstrations and imitation: ``--resume`` continues with RL from the imitation weights. A run killed
during imitation (hours from pixels) resumes it from ``checkpoints/imitation/``
(:class:`ImitationCheckpoint`: the demonstrations, the buffer they seeded, the actor and where behaviour
cloning and DAgger stood), written after the demonstrations, every ``checkpoint_every`` behaviour-cloning
steps and after each DAgger round's rollouts, and removed once RL's first checkpoint is written.

Under ``torchrun`` the imitation stage is data-parallel (:mod:`ecrl.distributed`): every process collects
the same demonstrations and shares each BC batch; rank 0 alone goes on with RL, the others stop.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from safetensors.torch import load_file, save_file
from sb3_contrib import TQC
from stable_baselines3 import SAC, TD3, HerReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import CSVOutputFormat, Logger, make_output_format
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv
from torch.utils.tensorboard import SummaryWriter

import ecrl.envs  # noqa: F401  (registers ecrl/Push*)
from ecrl import distributed
from ecrl.checkpoint import load_optimizer_state, optimizer_state, replace_dir
from ecrl.encoders import load_encoder
from ecrl.encoders.rows import EncodedObservation, FrameRows, frame_statistics
from ecrl.envs.scene import MAIN_CAMERAS
from ecrl.eval_report import log_report
from ecrl.evaluation import evaluate
from ecrl.policies.actor import policy_from_model
from ecrl.policies.config import TrainConfig
from ecrl.policies.demos import (
    BC_BATCH,
    LOSSES_KEPT,
    BCPosition,
    DemoBCCallback,
    Demos,
    FreezeActorCallback,
    collect_demos,
    dagger_round,
    pretrain_actor,
)
from ecrl.policies.replay import load_replay, save_replay
from ecrl.policies.sb3 import ENTITY_POLICIES
from ecrl.policy import Policy
from ecrl.training import Run, WindowLog, close_run, open_run, start_run, torch_device

ALGOS = {"sac": SAC, "td3": TD3, "tqc": TQC}
DEMOS_FILE = "demos.npz"
"""Where, beside the imitation policy, the demonstrations imitation grew are kept for ``--resume``."""
BC_LOG_EVERY = 100
"""Cloning steps between the imitation stage's tensorboard points (``imitation/bc_loss``, ``time/bc_steps_per_s``)."""


def _make_env(config: TrainConfig, frames: FrameRows | None = None) -> gym.Env:
    """The training env; with ``frames`` (``--encoder``) it renders the encoder's cameras and observes its entities."""
    if frames is None:
        return gym.make("ecrl/Push-v0", **config.env_kwargs())
    size, cameras = frames.encoder.config.image_size, tuple(frames.cameras)
    return EncodedObservation(gym.make("ecrl/Push-v0", **config.env_kwargs(), pixels=size, cameras=cameras), frames)


STATISTICS_FRAMES = 256
"""Env resets whose frames set the normalisation of an encoder's entities (``--encoder``)."""


def front_end(config: TrainConfig) -> FrameRows:
    """``--encoder``'s front end: the frozen encoder, its cameras (its checkpoint's meta) and the normalisation of
    its rows over the frames of :data:`STATISTICS_FRAMES` resets of the training env (seeded: a resumed run
    gets the same)."""
    encoder = load_encoder(config.encoder)
    cameras = list(encoder.meta.get("cameras") or MAIN_CAMERAS)[: encoder.config.views]
    if len(cameras) != encoder.config.views:
        raise ValueError(f"the encoder {config.encoder} reads {encoder.config.views} views; its meta names {cameras}")
    env = gym.make("ecrl/Push-v0", **config.env_kwargs(), pixels=encoder.config.image_size, cameras=tuple(cameras))
    pixels = np.stack([env.reset(seed=config.seed + 3_000_000 + k)[0]["pixels"] for k in range(STATISTICS_FRAMES)])
    env.close()
    mean, std = frame_statistics(encoder, pixels)
    kind = {"kind": encoder.kind, "config": encoder.config_dict()}
    frames = FrameRows(kind, mean.tolist(), std.tolist(), cameras=cameras)
    frames.encoder.load_state_dict(encoder.state_dict())
    return frames.eval()


def _policy(model, config: TrainConfig) -> Policy:
    """The model's inference policy (behind its front end, ``model.frame_rows``, when it acts from pixels)."""
    frames = getattr(model, "frame_rows", None)
    return policy_from_model(model, policy_meta(config, model, frames), frames)


def _with_actor_lr_scale(algo_cls: type, scale: float) -> type:
    """``algo_cls`` whose actor learns at ``scale`` times the critic's rate (SB3 sets one rate for both)."""
    if scale == 1.0:
        return algo_cls

    class ScaledActorLR(algo_cls):
        def _update_learning_rate(self, optimizers) -> None:
            super()._update_learning_rate(optimizers)
            for group in self.actor.optimizer.param_groups:
                group["lr"] *= scale

    ScaledActorLR.__name__ = f"{algo_cls.__name__}ScaledActorLR"
    return ScaledActorLR


def build_model(config: TrainConfig, env) -> SAC | TD3 | TQC:
    """The SB3 algorithm of ``config`` on the vectorised ``env``."""
    algo_cls = _with_actor_lr_scale(ALGOS[config.algo], config.actor_lr_scale)
    buffer_size = config.buffer_size or (config.steps + config.demo_episodes * config.horizon + config.n_envs)
    kwargs: dict[str, Any] = {
        "learning_rate": config.lr,
        "buffer_size": buffer_size,
        "batch_size": config.batch_size,
        "gamma": config.gamma,
        "tau": config.tau,
        "learning_starts": (
            config.learning_starts if config.learning_starts is not None else config.n_envs * config.horizon + 1
        ),
        "train_freq": (config.update_every, "step"),
        "gradient_steps": max(1, round(config.utd * config.update_every * config.n_envs)),
        "replay_buffer_class": HerReplayBuffer,
        "replay_buffer_kwargs": {"n_sampled_goal": config.her_k, "goal_selection_strategy": "future"},
        "seed": config.seed,
        "device": config.device,
        "verbose": 0,
    }
    if config.algo == "td3":
        n = int(env.action_space.shape[0])
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n), config.action_noise * np.ones(n))
    if config.arch == "mlp":
        policy: Any = "MultiInputPolicy"
        kwargs["policy_kwargs"] = {"net_arch": list(config.net_arch)}
    else:
        policy = ENTITY_POLICIES[config.algo]
        kwargs["policy_kwargs"] = {"net": asdict(config.net)}
    return algo_cls(policy, env, **kwargs)


def policy_meta(config: TrainConfig, model, frames: FrameRows | None = None) -> dict[str, Any]:
    pixels = (
        {}
        if frames is None
        else {
            "pixels": {"size": frames.encoder.config.image_size, "cameras": list(frames.cameras)},
            "encoder": str(config.encoder),
        }
    )
    return pixels | {
        "arch": config.arch,
        "algo": config.algo,
        "net_arch": list(config.net_arch),
        "train_n_objects": [config.n_objects],
        "goal": config.goal,
        "split": config.split,
        "env_steps": int(model.num_timesteps),
        "task": config.task,
    }


# ---------------------------------------------------------------------------------------------- checkpoints


def _optimizers(model) -> dict[str, torch.optim.Optimizer]:
    opts = {"actor": model.actor.optimizer, "critic": model.critic.optimizer}
    if getattr(model, "ent_coef_optimizer", None) is not None:
        opts["ent_coef"] = model.ent_coef_optimizer
    return opts


def _training_state(model) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors = {f"policy.{k}": v.detach().cpu().contiguous() for k, v in model.policy.state_dict().items()}
    meta: dict[str, Any] = {"num_timesteps": int(model.num_timesteps), "episode_num": int(model._episode_num)}
    if getattr(model, "log_ent_coef", None) is not None:
        tensors["log_ent_coef"] = model.log_ent_coef.detach().cpu().clone()
    meta["optimizers"] = {}
    for name, opt in _optimizers(model).items():
        opt_tensors, meta["optimizers"][name] = optimizer_state(opt, f"opt.{name}")
        tensors.update(opt_tensors)
    return tensors, meta


def _load_training_state(model, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    policy_state = {k.removeprefix("policy."): v for k, v in tensors.items() if k.startswith("policy.")}
    model.policy.load_state_dict(policy_state)
    if "log_ent_coef" in tensors:
        with torch.no_grad():
            model.log_ent_coef.copy_(tensors["log_ent_coef"])
    for name, opt in _optimizers(model).items():
        load_optimizer_state(opt, tensors, meta["optimizers"][name], f"opt.{name}")
    model.num_timesteps = int(meta["num_timesteps"])
    model._episode_num = int(meta["episode_num"])


def save_checkpoint(model, config: TrainConfig, run_dir: Path, replay: bool) -> Path:
    """Write ``checkpoints/latest/`` atomically (a temp dir renamed into place); returns it."""
    ckpt_root = run_dir / "checkpoints"
    ckpt_root.mkdir(parents=True, exist_ok=True)
    tmp = ckpt_root / f".tmp_{model.num_timesteps}"
    shutil.rmtree(tmp, ignore_errors=True)
    _policy(model, config).save(tmp)
    tensors, meta = _training_state(model)
    save_file(tensors, str(tmp / "training.safetensors"))
    (tmp / "training.json").write_text(json.dumps(meta, indent=1) + "\n")
    if replay:
        save_replay(model.replay_buffer, tmp / "replay.npz")
    if config.keep_checkpoints:
        shutil.copytree(tmp, ckpt_root / f"step_{model.num_timesteps}", ignore=shutil.ignore_patterns("replay.npz"))
    return replace_dir(tmp, ckpt_root / "latest")


def load_checkpoint(model, ckpt: Path) -> None:
    """Restore networks, optimizers, step counter and (if saved) the replay buffer from ``ckpt``."""
    if not (ckpt / "training.json").exists():
        raise FileNotFoundError(f"{ckpt} has no training state (training.json); cannot resume from it")
    meta = json.loads((ckpt / "training.json").read_text())
    _load_training_state(model, load_file(str(ckpt / "training.safetensors")), meta)
    if (ckpt / "replay.npz").exists():
        load_replay(model.replay_buffer, ckpt / "replay.npz")


class _ContinuedCSV(CSVOutputFormat):
    """SB3's ``progress.csv``, continued where a run's earlier sessions left it: SB3's own format truncates the
    file, so a resumed run's training log (and the learning curve drawn from it) kept only its last session."""

    def __init__(self, filename: Path) -> None:
        filename.touch()
        self.file = open(filename, "r+")  # noqa: SIM115  (closed by the logger, as SB3's)
        old = self.file.read()  # the file is left at its end: new rows go after the old ones
        header = old.split("\n", 1)[0]
        self.keys = header.split(",") if header else []
        if old and not old.endswith("\n"):  # a session killed in the middle of a row
            self.file.write("\n")
        self.separator, self.quotechar = ",", '"'


def _run_logger(folder: Path) -> Logger:
    """The training logger: tensorboard events and ``progress.csv`` in ``folder`` (a run's ``tb/``)."""
    folder.mkdir(parents=True, exist_ok=True)
    return Logger(str(folder), [make_output_format("tensorboard", str(folder)), _ContinuedCSV(folder / "progress.csv")])


class _Periodic(BaseCallback):
    """Calls :meth:`fire` at every multiple of ``every`` env steps (never for 0): the same steps whether or not
    the run was resumed in between (a run resumed at 10k with ``every`` 8k fires at 16k, not 18k)."""

    def __init__(self, every: int) -> None:
        super().__init__()
        self.every, self._last = every, 0

    def fire(self) -> None:
        raise NotImplementedError

    def _on_training_start(self) -> None:
        self._last = self.model.num_timesteps

    def _on_step(self) -> bool:
        now = self.model.num_timesteps
        if self.every > 0 and now // self.every > self._last // self.every:
            self._last = now
            self.fire()
        return True


class CheckpointCallback(_Periodic):
    """Saves ``checkpoints/latest/`` at every multiple of ``checkpoint_every`` env steps."""

    def __init__(self, config: TrainConfig, run_dir: Path) -> None:
        super().__init__(config.checkpoint_every)
        self.config, self.run_dir = config, run_dir

    def fire(self) -> None:
        save_checkpoint(self.model, self.config, self.run_dir, self.config.save_replay)


class PeriodicEvalCallback(_Periodic):
    """At every multiple of ``eval_every`` env steps, evaluates the current policy on several N and logs ``eval/…``."""

    def __init__(self, config: TrainConfig) -> None:
        super().__init__(config.eval_every)
        self.config = config

    def fire(self) -> None:
        run_periodic_eval(self.model, self.config, self.logger)


def run_periodic_eval(model, config: TrainConfig, logger) -> None:
    """Evaluate the current policy on ``config.eval_objects`` (default: N and 2N) and log ``eval/…`` to ``logger``."""
    n = config.n_objects
    objects = config.eval_objects or tuple(sorted({n, 2 * n}))
    parts = ("train", "test") if config.split else ("train",)
    policy = _policy(model, config)
    n_max = policy.kwargs.get("n_max")  # set for a flat MLP: it only runs at the padding it was trained with
    if n_max is not None:
        objects = tuple(k for k in objects if k <= n_max)
    report = evaluate(
        policy,
        objects,
        goal=config.goal,
        split=config.split,
        parts=parts,
        episodes=config.eval_episodes,
        n_max=n_max,
        progress=False,
    )
    log_report(report, logger)


# ---------------------------------------------------------------------------------------------- the run


@dataclass
class TrainResult:
    run_dir: Path
    env_steps: int
    wall_s: float
    demo_success: float | None = None
    bc_loss: float | None = None


IMITATION_STATE = "checkpoints/imitation/state/imitation.json"
"""Relative to a run directory: what a run killed in its imitation stage resumes from (:class:`ImitationCheckpoint`)."""


class ImitationCheckpoint:
    """``checkpoints/imitation/`` of a run in its imitation stage, so that a killed run resumes it.

    - ``replay.npz``: the replay buffer the demonstrations seeded (written once);
    - ``demos_<round>.npz``: the demonstrations as round ``round`` clones them (round 0: behaviour cloning
      on the expert's episodes; round ``r`` > 0: DAgger's ``r``-th, after its rollouts);
    - ``state/`` (replaced whole): ``imitation.json`` (the round, its demonstrations' file, the BC loss once
      known, and within a round the :class:`~ecrl.policies.demos.BCPosition`) and ``actor.safetensors``
      (the actor, and the optimizer of the round's cloning).
    """

    def __init__(self, run_dir: Path) -> None:
        self.root, self.state = run_dir / "checkpoints" / "imitation", run_dir / IMITATION_STATE

    def exists(self) -> bool:
        return self.state.exists()

    def _write(self, name: str, write: Callable[[Path], None]) -> None:
        """``write(path)`` to a temporary file renamed to ``name`` once complete."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp_{name}"
        write(tmp)
        tmp.replace(self.root / name)

    def save_replay(self, buffer: HerReplayBuffer) -> None:
        self._write("replay.npz", partial(save_replay, buffer))

    def save_demos(self, demos: Demos, round_: int) -> None:
        self._write(f"demos_{round_}.npz", demos.save)

    def save(self, actor: torch.nn.Module, round_: int, bc_loss: float | None, position: BCPosition | None) -> None:
        """Where imitation stands: at the start of round ``round_``'s cloning, or ``position`` within it."""
        tmp = self.root / ".tmp_state"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        tensors = {f"actor.{k}": v.detach().cpu().contiguous() for k, v in actor.state_dict().items()}
        meta: dict[str, Any] = {"round": round_, "demos": f"demos_{round_}.npz", "bc_loss": bc_loss, "bc": None}
        if position is not None:
            opt_tensors, opt_meta = position.optimizer
            tensors.update(opt_tensors)
            meta["bc"] = {"step": position.step, "rng": position.rng, "optimizer": opt_meta, "losses": position.losses}
        save_file(tensors, str(tmp / "actor.safetensors"))
        (tmp / "imitation.json").write_text(json.dumps(meta, indent=1) + "\n")
        replace_dir(tmp, self.root / "state")
        for old in self.root.glob("demos_*.npz"):  # the earlier rounds' sets are no longer needed
            if old.name != meta["demos"]:
                old.unlink()

    def load(
        self, actor: torch.nn.Module, buffer: HerReplayBuffer | None
    ) -> tuple[int, float | None, BCPosition | None, Demos]:
        """Restore the actor (and ``buffer``) and return the round, the BC loss, the position within the round and
        the round's demonstrations."""
        meta = json.loads(self.state.read_text())
        tensors = load_file(str(self.state.parent / "actor.safetensors"))
        actor.load_state_dict({k.removeprefix("actor."): v for k, v in tensors.items() if k.startswith("actor.")})
        if buffer is not None and (self.root / "replay.npz").exists():
            load_replay(buffer, self.root / "replay.npz")
        bc = meta["bc"]
        position = None if bc is None else BCPosition(bc["step"], bc["rng"], (tensors, bc["optimizer"]), bc["losses"])
        return meta["round"], meta["bc_loss"], position, Demos.load(self.root / meta["demos"])

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _imitate(
    model: Any,
    config: TrainConfig,
    demos: Demos,
    run_dir: Path,
    world: distributed.World,
    resume: tuple[int, float | None, BCPosition | None] | None = None,
) -> float:
    """The imitation stage before RL: BC on ``demos``, then DAgger (growing ``demos``); returns the BC loss.

    Round 0 clones the expert's demonstrations, rounds 1 … ``dagger_iterations`` are DAgger's (rollouts,
    then cloning on the grown set). Rank 0 checkpoints as it goes (:class:`ImitationCheckpoint`); ``resume``
    (round, BC loss, position within the round) continues from such a checkpoint, ``demos`` being that
    round's. Saves the policy as imitation left it (``run_dir/imitation``, for comparison with
    ``final/``) and the grown demonstrations beside it, so that ``--resume`` after a crash in RL keeps the
    BC term's data; with ``eval_every``, evaluates it (logged at step 0).
    """
    progress = config.progress and world.main
    checkpoints = ImitationCheckpoint(run_dir) if world.main and config.checkpoint_every else None
    first, bc_loss, position = resume or (0, None, None)
    writer = SummaryWriter(str(run_dir / "tb")) if world.main else None
    log = WindowLog(writer, "time/bc_steps_per_s")
    make_env = partial(_make_env, config, getattr(model, "frame_rows", None))
    for round_ in range(first, config.dagger_iterations + 1):
        if round_ > first:  # DAgger's rollouts of this round (a resumed round has them already)
            grown = dagger_round(
                model.actor,
                make_env,
                demos,
                round_ - 1,
                config.dagger_episodes,
                config.seed,
                progress,
                of=config.dagger_iterations,
            )
            demos.obs, demos.actions = grown.obs, grown.actions  # the BC term uses all
            if checkpoints is not None:
                checkpoints.save_demos(demos, round_)
                checkpoints.save(model.actor, round_, bc_loss, None)
        save = None if checkpoints is None else partial(checkpoints.save, model.actor, round_, bc_loss)
        steps, seed = (config.bc_steps, config.seed) if round_ == 0 else (config.dagger_steps, config.seed + round_ - 1)
        log.restart()  # the rate counts cloning only, not the rollouts
        losses = pretrain_actor(
            model.actor,
            demos,
            steps,
            seed=seed,
            progress=progress,
            world=world,
            start=position if round_ == first else None,
            checkpoint=save,
            checkpoint_every=config.checkpoint_every,
            on_step=partial(_log_bc_step, log, _bc_steps_before(config, round_), steps),
        )
        if not losses:
            continue
        round_loss = float(np.mean(losses[-LOSSES_KEPT:]))
        bc_loss = round_loss if round_ == 0 else bc_loss
        if world.main:
            print(f"imitation round {round_}: {steps:,} cloning steps, BC loss {round_loss:.4g}")
    if writer is not None:
        writer.close()
    if not world.main:
        return bc_loss
    if config.algo == "td3":
        model.actor_target.load_state_dict(model.actor.state_dict())
    _policy(model, config).save(run_dir / "imitation")
    demos.save(run_dir / "imitation" / DEMOS_FILE)
    if config.eval_every:
        run_periodic_eval(model, config, model.logger)
        model.logger.dump(0)
    return bc_loss


def _bc_steps_before(config: TrainConfig, round_: int) -> int:
    """The cloning steps of the imitation rounds before ``round_`` (round 0: BC, then DAgger's)."""
    return 0 if round_ == 0 else config.bc_steps + (round_ - 1) * config.dagger_steps


def _log_bc_step(log: WindowLog, before: int, steps: int, step: int, loss: torch.Tensor) -> None:
    """Add one cloning step's loss to ``log``; every ``BC_LOG_EVERY`` steps and at a round's last, write
    ``imitation/bc_loss`` and ``time/bc_steps_per_s`` at the cloning step counted over every round."""
    log.add({"imitation/bc_loss": loss})
    if (step + 1) % BC_LOG_EVERY == 0 or step + 1 == steps:
        log.flush(before + step + 1, None, 1)


def train(config: TrainConfig, resume: Path | None = None, session: Mapping[str, Any] | None = None) -> TrainResult:
    """Run (or, with ``resume`` = a run directory, continue) one training run. Returns where it went.

    With ``resume`` the run's own ``config.json`` is used, except for ``steps``, which may be raised to
    extend a finished run, and ``threads``, ``device`` and ``progress`` (:func:`ecrl.training.start_run`).
    Under ``torchrun`` every process calls it; the processes other than rank 0 return after imitation.
    ``session`` is logged with each session in ``sessions.jsonl`` (`ecrl-train`'s final-evaluation settings).
    """
    run = start_run(TrainConfig, config, resume, "an RL", lambda c: f"{c.task}__{c.algo}", IMITATION_STATE, session)
    with distributed.session(torch_device(run.config.device)) as (world, device):
        run.dir = distributed.broadcast(run.dir)  # a new run's name has the time in it: rank 0's
        return _train(run, world, device)


def _train(run: Run, world: distributed.World, device: torch.device) -> TrainResult:
    config, run_dir, main = run.config, run.dir, world.main
    checkpoints = ImitationCheckpoint(run_dir)
    # A run resumed before RL's first checkpoint continues its imitation stage, in one process.
    imitating = run.resumed and not (run.checkpoint / "training.json").exists() and checkpoints.exists()
    in_rl = run.resumed and not imitating
    if imitating and world.size > 1:
        raise ValueError(
            f"{run_dir} stopped in its imitation stage, which resumes in one process: "
            f"ecrl-train --resume {run_dir} (without torchrun)"
        )
    if not main and (run.resumed or not (config.demos and config.bc_steps)):
        return TrainResult(run_dir=run_dir, env_steps=0, wall_s=0.0)  # nothing data-parallel: RL is rank 0's
    vec_cls = SubprocVecEnv if config.n_envs > 1 and config.subproc else DummyVecEnv
    frames = front_end(config) if config.encoder is not None else None
    if frames is not None:  # the networks read the encoder's rows
        config = replace(config, net=replace(config.net, entity_dim=frames.width))
    env = make_vec_env(
        partial(_make_env, config, frames),
        n_envs=config.n_envs,
        seed=config.seed + (1_000_000 if in_rl else 0),
        vec_env_cls=vec_cls,
    )
    model = build_model(config if world.size == 1 else replace(config, device=str(device)), env)
    model.frame_rows = frames  # the front end the policies it exports act through (None: state rows)
    if in_rl:
        load_checkpoint(model, run.checkpoint)
    if main:
        open_run(run, int(model.num_timesteps), **world.describe(BC_BATCH, "bc_"))
        model.set_logger(_run_logger(run_dir / "tb"))
    started = time.perf_counter()
    result = TrainResult(run_dir=run_dir, env_steps=0, wall_s=0.0)

    callbacks: list[BaseCallback] = [CheckpointCallback(config, run_dir), PeriodicEvalCallback(config)]
    demos, resume = None, None
    saved_demos = run_dir / "imitation" / DEMOS_FILE
    # On resume the buffer already holds the demos; the BC term needs them too: the set imitation
    # grew (saved beside the imitation policy), or else the expert's episodes again (same seeds).
    if imitating:
        round_, bc_loss, position, demos = checkpoints.load(model.actor, model.replay_buffer)
        resume = (round_, bc_loss, position)
    elif in_rl and config.bc_weight > 0 and saved_demos.exists():
        demos = Demos.load(saved_demos)
    elif config.demos and (not in_rl or config.bc_weight > 0):
        demos = collect_demos(
            partial(_make_env, config, frames),
            config.demo_episodes,
            seed=config.seed + 2_000_000,
            replay_buffer=None if in_rl or not main else model.replay_buffer,
            progress=config.progress and main,
        )
        if not in_rl and main and config.bc_steps and config.checkpoint_every:
            checkpoints.save_replay(model.replay_buffer)
            checkpoints.save_demos(demos, 0)
            checkpoints.save(model.actor, 0, None, None)
    if demos is not None:
        result.demo_success = demos.successes / demos.episodes
        if config.bc_weight > 0:
            callbacks.append(DemoBCCallback(demos, config.bc_weight, config.bc_every, seed=config.seed))
    if config.actor_warmup:
        callbacks.append(FreezeActorCallback(config.actor_warmup))
    if not in_rl and demos is not None and config.bc_steps:
        result.bc_loss = _imitate(model, config, demos, run_dir, world, resume)
    if not main:  # RL is rank 0's
        env.close()
        return result
    if not in_rl:
        # Nothing done so far is lost if the run dies once RL has started: --resume starts from here.
        save_checkpoint(model, config, run_dir, config.save_replay)
        checkpoints.remove()
    # learning_starts counts env steps; the demos already fill the buffer.
    if config.demos:
        model.learning_starts = 0

    remaining = config.steps - model.num_timesteps
    if remaining > 0:
        model.learn(
            remaining,
            callback=CallbackList(callbacks),
            reset_num_timesteps=not in_rl,
            progress_bar=config.progress,
        )
    save_checkpoint(model, config, run_dir, config.save_replay)
    _policy(model, config).save(run_dir / "final")
    env.close()
    result.env_steps = int(model.num_timesteps)
    result.wall_s = time.perf_counter() - started
    summary = {k: v for k, v in (("demo_success", result.demo_success), ("bc_loss", result.bc_loss)) if v is not None}
    close_run(run, result.env_steps, result.wall_s, **summary)
    return result
