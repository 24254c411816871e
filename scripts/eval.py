"""Evaluate a trained policy (or the scripted expert) on 1 … 16 objects and on held-out combinations,
or on OGBench's cube tasks.

`ecrl-eval PATH` loads a policy with `ecrl.load` (a run directory, a checkpoint directory or one of
its files; or `expert` for the scripted expert alone), runs `--episodes` episodes per part × number
of objects on fixed evaluation seeds, and writes to `--out`:

- `eval.json`: every number (per episode too), the arguments, the command and provenance;
- `README.md`: a table per (part, N): success with its 95% Wilson interval, fraction placed,
  return, episode length, and the scripted expert's success on the same seeds (the ceiling);
- `success.png`: success rate vs number of objects, training N shaded;
- `tb/`: tensorboard scalars `eval/<part>/n<N>/success_rate` (and `fraction_placed`, `mean_return`,
  `episode_length`);
- `videos/<part>_n<N>.gif` with `--video`: the first episode of every configuration.

The default output directory is `<run>/eval/` for a run directory, `<checkpoint>_eval/` beside a
checkpoint directory, and `results/eval_expert/` for `expert`. The goal kind and the split default to
those the policy was trained on (its `meta`); with a split, both parts are evaluated.

`--env ogbench-cube` (the default for a policy whose `meta["env"]` says so, e.g. a planner trained on
OGBench play data; extra `ecrl[ogbench]`) evaluates with OGBench's protocol instead: its five
evaluation tasks (`--tasks`) per number of cubes (1, 2, 3, 4 or 8), 50 episodes per task, each to
OGBench's episode limit or its own success flag. A row per (task, N) is named `task1` … `task5`
(`eval/task1/n2/success_rate`) with OGBench's task name, and a row per N gives OGBench's headline
number, the mean success over the tasks (`eval/overall/n2/success_rate`). There is no scripted expert
for OGBench's tasks, so no ceiling.

Examples:
    # a trained run: N in {1, 2, 3, 4, 6, 8, 12}, its training split's train and test parts, expert ceiling
    ecrl-eval runs/push3__sac__0__20250101-000000 --objects 1 2 3 4 6 8 12

    # a checkpoint, held-out colour × shape combinations only, with videos
    ecrl-eval runs/push3__sac__0__20250101-000000/checkpoints/latest --split colour_shape --parts test --video

    # rule-assisted: at each step the policy sees the agent and the nearest object not yet placed,
    # kept until placed (ecrl.focus.Focus); every row of the report says so
    ecrl-eval results/rl_push2/select/policy --objects 2 4 8 --focus 1 --patience 30

    # the scripted expert alone, a smoke run in a few seconds
    ecrl-eval expert --objects 1 2 --episodes 2 --out /tmp/eval_expert

    # 4 processes, each loading the policy: configurations (part, N) are shared out, 25 episodes at a time;
    # the numbers are those of one process with --batch-size 25
    ecrl-eval runs/push3__sac__0__20250101-000000 --workers 4 --batch-size 25

    # a planner trained on OGBench play data (meta["env"] = "ogbench-cube"): OGBench's five tasks on
    # cube-double, -triple, -quadruple and -octuple, 50 episodes per task, in 2 processes
    ecrl-eval runs/cube2__diffusion__0__20250101-000000 --objects 2 3 4 8 --workers 2

    # a planner trained on the Fetch arm's data (meta["env"] = "fetch", meta["skill"] = "pick_place"): the
    # arm's pick-and-place on 1 … 4 objects, beside the arm's scripted expert on the same seeds
    ecrl-eval runs/fetch_pick_place2 --objects 1 2 3 4

    # several evaluations in one plot of success vs N (see `ecrl-eval compare --help`)
    ecrl-eval compare results/diffusion_push3/longest results/diffusion_push3/focus2 \\
        --labels "all objects" "focus=2" --train-n 3 --out /tmp/focus_vs_all.png
"""

from __future__ import annotations

import csv
import functools
import json
import shlex
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Literal

import tyro

import ecrl
from ecrl.checkpoint import CheckpointError
from ecrl.envs import ogbench as ogb
from ecrl.eval_configs import ENVS, check_action_dim, check_ogbench_settings, embodiment_of, max_objects, resolve_skill
from ecrl.eval_report import report_table, write_report
from ecrl.evaluation import EVAL_SEED, ExpertPolicy, check_settings, evaluate
from ecrl.focus import Focus
from ecrl.parallel import PolicyLoader, check_workers
from ecrl.policy import CONFIG, Policy
from ecrl.scripts import eval_compare
from ecrl.scripts.cli import cli_errors, on_command_line
from ecrl.training import parse_assignment

EXPERT = "expert"


@dataclass(frozen=True)
class Args:
    """Evaluate a policy: success per number of objects and split part, with the scripted expert as ceiling."""

    path: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="PATH")]
    """A run directory, a checkpoint directory (or one of its files), or `expert` for the scripted expert alone."""
    env: Literal["push", "fetch", "ogbench-cube"] | None = None
    """Benchmark: the library's push env, the Fetch arm (`--skill`), or OGBench's cube tasks (its protocol); default: the policy's `meta["env"]`, else push."""
    skill: str | None = None
    """Fetch arm: push, pick_place or stack (default: the policy's `meta["skill"]`, else pick_place)."""
    objects: tuple[int, ...] | None = None
    """Numbers of objects to evaluate (default: 1 2 3 4 6 8 12 on push; 1 2 3 4 6 8 on fetch; OGBench's sizes 1 2 3 4 8 on ogbench-cube)."""
    tasks: tuple[int, ...] | None = None
    """OGBench cubes: OGBench's evaluation tasks (default: all five, 1 … 5)."""
    goal: str | None = None
    """Push: goal kind (positions, adjacent, sort, ordered); default: the policy's training goal, else positions."""
    split: str | None = None
    """Push: compositional split (colour_shape, shape_goal, or none); default: the policy's training split, else none."""
    parts: tuple[str, ...] | None = None
    """Push: parts of the split to evaluate (train, test); default: both with a split, else train."""
    episodes: int = 50
    """Episodes per (part or task, number of objects)."""
    seed: int = EVAL_SEED
    """Episode `i` of every configuration resets with seed `seed + i`; keep it far from training seeds."""
    n_max: int | None = None
    """Pad observations to this many object rows (default: N, or the fixed width of a flat-MLP policy)."""
    stop_on_success: bool = False
    """Push: end an episode once every object is placed (default: run to the horizon and read success at its end; an OGBench episode always ends at success)."""
    expert: bool = True
    """Also evaluate the scripted expert on the same seeds, as the ceiling (`--no-expert` skips it; push only: OGBench's tasks have no scripted expert)."""
    video: bool = False
    """Write one GIF per (part, N) into `<out>/videos/`."""
    out: Path | None = None
    """Output directory (default: `<run>/eval/`, `<checkpoint>_eval/`, or `results/eval_expert/`)."""
    device: str = "cpu"
    """Torch device of the policy."""
    policy_options: tuple[str, ...] = ()
    """`KEY=VALUE` settings of the policy to change for this evaluation (e.g. `sampling_steps=10 fixed_noise=false` for a diffusion planner); any plain setting in its policy.json `kwargs`. `--copy-policy` copies the policy with them."""
    focus: int = 0
    """Rule-assisted evaluation: at every step show the policy the agent and at most this many objects, those not yet placed nearest the pusher first (`ecrl.focus.Focus`; 0: every object, no rule). Reports label the rows rule-assisted."""
    patience: int = 0
    """With `--focus`: 0 chooses the objects afresh at every step; P > 0 keeps them until placed and sets aside for P steps one that has not come 5 mm nearer its target for P steps."""
    copy_policy: bool = False
    """Copy the evaluated checkpoint (and the run's config.json, training log and sessions) into `<out>/policy/`, so the output folder can be re-evaluated on its own."""
    progress: bool = True
    """Show a progress bar."""
    workers: int = 1
    """Processes running episodes, each loading the policy from PATH, a batch of episodes (`--batch-size`) at a time: the results are those of one process with the same batches, every per-episode number identical (`ecrl.evaluation.evaluate`)."""
    batch_size: int | None = None
    """Episodes run side by side, the unit of `--workers` (default: all `--episodes` of a (part, N), so that workers take whole configurations; the scripted expert, whose actions do not depend on the batch, is spread over the workers). A network acts a little differently on batches of another size, so its numbers change with it."""


def default_out(path: str) -> Path:
    """`<run>/eval/` for a run directory, `<checkpoint>_eval/` beside a checkpoint, `results/eval_expert/` for the expert."""
    if path == EXPERT:
        return Path("results/eval_expert")
    p = Path(path)
    if p.is_file():
        p = p.parent
    return p.parent / f"{p.name}_eval" if (p / CONFIG).exists() else p / "eval"


def fixed_n_max(policy: Policy | ExpertPolicy) -> int | None:
    """The observation width a flat-MLP policy was trained with (entity-centric policies have none)."""
    n_max = getattr(policy, "kwargs", {}).get("n_max")
    return None if n_max is None else int(n_max)


DEFAULT_OBJECTS = {
    "push": (1, 2, 3, 4, 6, 8, 12),
    "fetch": (1, 2, 3, 4, 6, 8),
    "ogbench-cube": tuple(ogb.CUBE_ENV_TYPES),
}
"""Numbers of objects evaluated when `--objects` is not given."""


def env_of(args: Args, meta: dict) -> str:
    """The benchmark: ``--env``, else the policy's ``meta["env"]``, else push."""
    return args.env or meta.get("env") or "push"


def resolve(args: Args, policy) -> tuple[tuple[int, ...], dict]:
    """Numbers of objects and :func:`evaluate` keywords: defaults from the policy's meta, then checked."""
    meta = policy.meta
    env = env_of(args, meta)
    if env not in ENVS:
        raise ValueError(f"the policy's meta['env'] is {env!r}: expected one of {list(ENVS)} (or pass --env)")
    if env == "ogbench-cube" and args.path == EXPERT:
        raise ValueError("the scripted expert pushes: OGBench's cube tasks have none (evaluate a trained policy)")
    check_action_dim(policy, env)
    objects, n_max = args.objects or DEFAULT_OBJECTS[env], args.n_max
    width = fixed_n_max(policy)
    if width is not None:
        n_max = n_max or width
        if n_max != width:
            raise ValueError(f"this flat-MLP policy reads exactly {width} object rows; got --n-max {n_max}")
        dropped = [n for n in objects if n > width]
        objects = tuple(n for n in objects if n <= width)
        if not objects:
            raise ValueError(f"this flat-MLP policy runs on at most {width} objects; got --objects {args.objects}")
        if dropped:
            print(f"note: flat-MLP policy (fixed width {width}): skipping N = {dropped}", file=sys.stderr)
    kwargs = (ogbench_settings if env == "ogbench-cube" else push_settings)(args, meta, objects, n_max)
    skill = resolve_skill(env, args.skill or (meta.get("skill") if env == "fetch" else None))
    if skill is not None:
        kwargs |= {"env": "fetch", "skill": skill}
    check_workers(args.workers)
    return objects, {
        **kwargs,
        "episodes": args.episodes,
        "seed": args.seed,
        "n_max": n_max,
        "stop_on_success": args.stop_on_success,
        "progress": args.progress,
        "workers": args.workers,
        "batch_size": args.batch_size,
    }


def push_settings(args: Args, meta: dict, objects: tuple[int, ...], n_max: int | None) -> dict:
    """The push (and Fetch) keywords of :func:`evaluate`: goal and split from the policy's meta unless given, checked."""
    if args.tasks:
        raise ValueError(
            f"--tasks {' '.join(map(str, args.tasks))}: OGBench's evaluation tasks; add --env ogbench-cube"
        )
    split = args.split if args.split is not None else meta.get("split")
    split = None if split in (None, "none") else split
    goal = args.goal or meta.get("goal") or "positions"
    parts = args.parts or (("train", "test") if split else ("train",))
    most = max_objects(env_of(args, meta))
    check_settings(objects, goal, split, parts, args.episodes, n_max, args.batch_size, max_objects=most)
    return {"goal": goal, "split": split, "parts": parts}


def ogbench_settings(args: Args, meta: dict, objects: tuple[int, ...], n_max: int | None) -> dict:
    """The OGBench keywords of :func:`evaluate` (``env``, ``tasks``), checked; push options are refused."""
    given = [f"--{name}" for name in ("goal", "split", "parts") if getattr(args, name) is not None]
    if given:
        raise ValueError(f"{', '.join(given)}: push options; OGBench cubes have their own tasks (--tasks)")
    tasks = args.tasks or tuple(range(1, ogb.N_TASKS + 1))
    check_ogbench_settings(objects, tasks, args.episodes, n_max, args.batch_size)
    return {"env": "ogbench-cube", "tasks": tasks}


def focused(args: Args, policy: Policy | ExpertPolicy) -> Policy | ExpertPolicy | Focus:
    """``policy``, or with ``--focus K`` the policy behind the object-focus rule (:class:`ecrl.focus.Focus`)."""
    if not args.focus:
        if args.patience:
            raise ValueError(f"--patience {args.patience} applies to the focus rule: add --focus K")
        return policy
    if args.path == EXPERT:
        raise ValueError("--focus needs a trained policy, not the scripted expert (it reads every object itself)")
    return Focus(policy, args.focus, args.patience)


def run(args: Args, policy, objects: tuple[int, ...], kwargs: dict, command: str, acting=None) -> tuple[str, Path]:
    """Evaluate ``acting`` (default: ``policy``; e.g. ``policy`` behind a rule), write every output, and return
    the table and the output directory; ``--copy-policy`` copies ``policy``."""
    out = args.out or default_out(args.path)
    report = evaluate(
        policy if acting is None else acting, objects, video_dir=out / "videos" if args.video else None, **kwargs
    )
    env = kwargs.get("env", "push")
    ceiling = args.expert and args.path != EXPERT and env in ("push", "fetch")
    expert = evaluate(expert_source(env), objects, **kwargs) if ceiling else None
    write_report(report, out, command, expert=expert)
    run_dir = _run_dir(Path(args.path))
    if args.path != EXPERT and (run_dir / "tb" / "progress.csv").exists():
        plot_learning_curve(run_dir / "tb" / "progress.csv", out / "learning_curve.png")
    if args.copy_policy and args.path != EXPERT:
        dest = out / "policy"
        dest.mkdir(parents=True, exist_ok=True)
        policy.save(dest)
        if (run_dir / "config.json").exists():
            shutil.copy(run_dir / "config.json", dest / "train_config.json")
        if (run_dir / "tb" / "progress.csv").exists():  # the training log behind learning_curve.png
            shutil.copy(run_dir / "tb" / "progress.csv", dest / "train_progress.csv")
        if (run_dir / "sessions.jsonl").exists():  # env steps and wall-clock of each training session
            shutil.copy(run_dir / "sessions.jsonl", dest / "train_sessions.jsonl")
    return report_table(report, expert), out


def plot_learning_curve(progress_csv: Path, path: Path) -> None:
    """Success vs training progress: the periodic ``eval/<part>/n<N>/success_rate`` and, for RL runs,
    ``rollout/success_rate``, against env steps (RL; step 0: after imitation, before RL) or gradient
    steps (diffusion planners, whose log has ``train/gradient_steps``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(progress_csv) as f:
        rows = list(csv.DictReader(f))
    keys = sorted({k for row in rows for k in row if k.endswith("success_rate") and row[k] != ""})
    if not keys:
        return
    x_key, x_label = (
        ("train/gradient_steps", "gradient steps")
        if "train/gradient_steps" in rows[0]
        else (
            "time/total_timesteps",
            "env steps",
        )
    )
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key in keys:
        points = [(float(r.get(x_key) or 0), float(r[key])) for r in rows if r.get(key)]
        style = "o-" if key.startswith("eval/") else "-"
        label = key.removesuffix("/success_rate") + (
            " (exploring, last 100 episodes)" if key.startswith("rollout") else ""
        )
        ax.plot(*zip(*points, strict=True), style, ms=3, label=label)
    ax.set(xlabel=x_label, ylabel="success rate", ylim=(-0.02, 1.02), title=f"training: success vs {x_label}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def with_policy_options(policy: Policy, items: Sequence[str]) -> Policy:
    """``policy`` with ``["sampling_steps=10", "fixed_noise=false"]`` applied (see :meth:`Policy.with_options`);
    each value is typed like the setting it replaces."""
    return policy.with_options(**policy_options(policy, items))


def policy_options(policy: Policy, items: Sequence[str]) -> dict:
    """``{"sampling_steps": 10, "fixed_noise": False}`` for ``["sampling_steps=10", "fixed_noise=false"]``:
    each value typed like the setting of ``policy`` it replaces."""
    types = {k: type(v) for k, v in policy.options.items()}
    for item in items:  # the spelling of before ecrl.focus (issue 20)
        name, _, value = item.partition("=")
        if name == "focus":
            raise ValueError(f"focus is not a policy option but a rule around the policy: use --focus {value}")
    return dict(parse_assignment(item, types, "policy option") for item in items)


def expert_source(env: str) -> Callable[[], ExpertPolicy]:
    """What builds the scripted expert of ``env`` (push: the pusher's, fetch: the arm's), in any process."""
    return functools.partial(ExpertPolicy, embodiment=embodiment_of(env))


def worker_source(args: Args, options: dict) -> Callable[[], ExpertPolicy] | PolicyLoader:
    """What each worker process builds its acting policy from (``--workers``): the policy at ``args.path``
    with ``options`` and the focus rule, or the scripted expert."""
    if args.path == EXPERT:
        return expert_source(args.env or "push")
    return PolicyLoader(args.path, args.device, tuple(options.items()), args.focus, args.patience)


@dataclass
class FinalEvaluation:
    """The evaluation a training CLI runs at its end (`ecrl-train`, `ecrl-train-diffusion`)."""

    final_eval_objects: tuple[int, ...] | None = None
    """Numbers of objects of the evaluation at the end of training (written to <run>/eval/; empty: skip). Default: 1 2 3 4 6 8 on push; for a policy of OGBench cubes its training size (OGBench's five tasks; sizes 1, 2, 3, 4 or 8)."""
    final_eval_episodes: int = 50
    """Episodes per number of objects (and split part, or OGBench task) of that evaluation."""

    def of_call(self, resume: Path | None, argv: Sequence[str]) -> FinalEvaluation:
        """The final evaluation of a call with ``argv``: these settings, except that a resumed run (``resume``)
        keeps the ones its sessions recorded (:meth:`session_record`) for each option not in ``argv``. (A run
        started with ``--final-eval-objects`` and nothing after it, resumed without the option, once ran the
        default evaluation at N = 1-8 with the expert: over an hour for a planner from pixels.)"""
        own = FinalEvaluation(self.final_eval_objects, self.final_eval_episodes)
        recorded = _recorded_final_evaluation(resume) if resume is not None else None
        if recorded is None:
            return own
        kept = {
            name: value for name, value in recorded.items() if not on_command_line(argv, "--" + name.replace("_", "-"))
        }
        return replace(own, **kept)

    def session_record(self) -> dict:
        """What a training run logs with each session in ``sessions.jsonl`` for :meth:`of_call` to read back."""
        objects = None if self.final_eval_objects is None else list(self.final_eval_objects)
        return {"final_eval": {"final_eval_objects": objects, "final_eval_episodes": self.final_eval_episodes}}

    def run_final_evaluation(self, run_dir: Path, progress: bool) -> None:
        """`ecrl-eval run_dir` with these settings (nothing with no numbers of objects)."""
        objects = self.final_eval_objects
        if objects is None:
            meta = ecrl.load(run_dir).meta
            ogbench = meta.get("env") == "ogbench-cube"
            objects = tuple(meta.get("train_n_objects", ())) if ogbench else (1, 2, 3, 4, 6, 8)
        if objects:
            quiet = [] if progress else ["--no-progress"]
            main([str(run_dir), "--objects", *map(str, objects), "--episodes", str(self.final_eval_episodes), *quiet])


def _recorded_final_evaluation(run_dir: Path) -> dict | None:
    """The final-evaluation settings the last session of ``run_dir`` that recorded them logged, or ``None``
    (no such session: a run started before they were recorded, or no ``sessions.jsonl``)."""
    sessions = Path(run_dir) / "sessions.jsonl"
    if not sessions.exists():
        return None
    records = [json.loads(line) for line in sessions.read_text().splitlines() if line.strip()]
    recorded = [r["final_eval"] for r in records if "final_eval" in r]
    if not recorded:
        return None
    settings = dict(recorded[-1])
    if settings["final_eval_objects"] is not None:
        settings["final_eval_objects"] = tuple(settings["final_eval_objects"])
    return settings


def _run_dir(path: Path) -> Path:
    """The run directory behind a checkpoint: ``path`` itself, or the run that holds it as ``final/``,
    ``imitation/`` or another subfolder (its parent has the run's ``config.json``)."""
    if not (path / "config.json").exists() and (path.parent / "config.json").exists():
        return path.parent
    return path


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `ecrl-eval`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["compare"]:  # a policy folder named so is ./compare
        return eval_compare.main(argv[1:])
    args = tyro.cli(Args, args=argv, prog="ecrl-eval", description=__doc__)
    with cli_errors("ecrl-eval", (CheckpointError, ValueError)):  # bad input: a clean message, not a traceback
        expert = args.path == EXPERT
        policy = expert_source(args.env or "push")() if expert else ecrl.load(args.path, device=args.device)
        options = {}
        if args.policy_options:
            if expert:
                raise ValueError("--policy-options needs a trained policy, not the scripted expert")
            options = policy_options(policy, args.policy_options)
            policy = policy.with_options(**options)
        acting = focused(args, policy)
        objects, kwargs = resolve(args, policy)
        if args.workers > 1:  # each worker loads the policy itself
            acting = worker_source(args, options)
    table, out = run(args, policy, objects, kwargs, command=shlex.join(["ecrl-eval", *argv]), acting=acting)
    print(table)
    extra = (", videos/" if args.video else "") + (", policy/" if args.copy_policy else "")
    print(f"wrote {out}/ (eval.json, README.md, success.png, tb/{extra})")


if __name__ == "__main__":
    main()
