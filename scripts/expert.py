"""Roll out a scripted expert over goal kinds × numbers of objects (× skills) and report how often it succeeds.

The scripted experts solve tasks from privileged state: they are the data source for the diffusion
planners and the ceiling learned agents are compared to. This script measures that ceiling on
evaluation seeds far from any training seed (episode `e` resets with seed `seed + e`).

`--embodiment pusher` (the default; `ecrl.envs.ScriptedExpert`) writes, to `--out`
(default `results/expert`):

- `expert.json`: every number below, the arguments and the command that produced them;
- `README.md`: a markdown table per (goal kind, N) and that command;
- `success.png`: success rate vs number of objects, one line per goal kind, 95% Wilson intervals;
- `rollout.gif`: one episode seen from both cameras (`--no-video` skips it);
- `scene.png`: the start of that episode from both cameras, and its segmentation mask.

`--embodiment fetch` (`ecrl.envs.FetchExpert`: push, pick_place and stack on the Fetch arm) writes
`expert.json` and `README.md` (default `results/fetch_expert`): a table per (skill, goal kind, N)
with 95% Wilson intervals and the targets of issue 22, and how many solved episodes are still
solved 40 expert steps later (the last object let go, the gripper risen: a tower that falls then
shows here).

Examples:
    # the main job: 4 goal kinds × N in {1, 2, 3, 4, 6, 8} × 20 episodes (about a minute on one core)
    ecrl-expert

    # a smoke run in a few seconds
    ecrl-expert --episodes 2 --n-objects 1 3 --no-video --out /tmp/expert

    # one goal kind, many objects, tighter intervals
    ecrl-expert --goals sort --n-objects 4 8 12 16 --episodes 100 --out results/expert_sort

    # the Fetch arm: push and pick_place at N = 1, 2, 3, 6, towers of 3 and 4 (about a minute on one core)
    ecrl-expert --embodiment fetch

    # one Fetch skill, other goal kinds
    ecrl-expert --embodiment fetch --skills pick_place --goals sort adjacent --n-objects 2 4 --out /tmp/fetch_expert
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import tyro

from ecrl.envs import GOAL_KINDS, MAX_OBJECTS, SKILLS
from ecrl.envs.fetch_expert import measure_fetch_expert
from ecrl.envs.task import EMBODIMENT_MAX_OBJECTS, SKILL_GOALS
from ecrl.eval_report import success_cells
from ecrl.evaluation import evaluate as evaluate_policy
from ecrl.parallel import check_workers
from ecrl.reporting import (
    camera_strip,
    markdown_table,
    plot_success_vs_n,
    provenance,
    report_header,
    write_gif,
)
from ecrl.rollout import ExpertPolicy, Recorder, Step, rollout

FETCH_TARGETS = {("push", 1): 0.95, ("push", 2): 0.95, ("push", 3): 0.95, ("push", 6): 0.9}
FETCH_TARGETS |= {("pick_place", n): t for (_, n), t in FETCH_TARGETS.items()} | {("stack", 3): 0.9, ("stack", 4): 0.8}
"""Issue 22's success targets of the Fetch expert per (skill, N)."""
SETTLE_STEPS = 40
"""Fetch: expert steps run on after a success (it releases the last object and rises) before checking it again."""
_DEFAULTS = {
    "pusher": {"goals": GOAL_KINDS, "n_objects": (1, 2, 3, 4, 6, 8), "out": Path("results/expert")},
    "fetch": {"goals": ("positions",), "n_objects": (1, 2, 3, 6), "out": Path("results/fetch_expert")},
}


@dataclass(frozen=True)
class Args:
    """Scripted-expert rollouts: success rate per goal kind and number of objects (and skill, for the Fetch arm)."""

    embodiment: Literal["pusher", "fetch"] = "pusher"
    """Whose expert: the planar pusher's (`ScriptedExpert`) or the Fetch arm's (`FetchExpert`)."""
    goals: tuple[str, ...] | None = None
    """Goal kinds (of positions, adjacent, sort, ordered; default: all four, fetch: positions; fetch skips misfits)."""
    n_objects: tuple[int, ...] | None = None
    """Numbers of objects to evaluate (default: 1 2 3 4 6 8 for the pusher; 1 2 3 6 for fetch's push and pick_place)."""
    skills: tuple[str, ...] | None = None
    """Fetch only: skills to evaluate (default: push, pick_place, stack)."""
    tower_heights: tuple[int, ...] | None = None
    """Fetch only: numbers of objects for stack (default: 3 4)."""
    episodes: int = 20
    """Episodes per (goal kind, number of objects)."""
    seed: int = 10_000
    """Episode `e` of every configuration resets with seed `seed + e`; keep it far from training seeds."""
    out: Path | None = None
    """Output directory, created if missing (default: `results/expert`, fetch: `results/fetch_expert`)."""
    video: bool = True
    """Pusher: write `rollout.gif` and `scene.png` (rendering; `--no-video` skips both); the fetch report has none."""
    video_goal: str = "positions"
    """Goal kind of the rendered episode."""
    video_n: int = 3
    """Number of objects in the rendered episode."""
    video_size: int = 96
    """Side in pixels of each camera view in `rollout.gif` (`scene.png` uses twice this)."""
    video_every: int = 2
    """Keep every k-th step in `rollout.gif` (the env runs at 20 steps per second)."""
    workers: int = 1
    """Pusher: processes running episodes (the numbers are those of one process, see `ecrl.evaluation.evaluate`)."""

    def __post_init__(self) -> None:
        fetch = self.embodiment == "fetch"
        # Unset options take the embodiment's defaults, so that expert.json records what ran.
        for name, value in _DEFAULTS[self.embodiment].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        if fetch:
            object.__setattr__(self, "skills", SKILLS if self.skills is None else self.skills)
            object.__setattr__(self, "tower_heights", (3, 4) if self.tower_heights is None else self.tower_heights)
            object.__setattr__(self, "video", False)  # the fetch report has no media
            if self.workers != 1:
                raise ValueError("--workers is for the pusher's expert; the fetch expert runs in one process")
            for skill in self.skills:
                if skill not in SKILLS:
                    raise ValueError(f"unknown skill {skill!r}: expected one of {list(SKILLS)}")
        elif self.skills is not None or self.tower_heights is not None:
            raise ValueError("--skills and --tower-heights are for --embodiment fetch (the pusher only pushes)")
        most = EMBODIMENT_MAX_OBJECTS[self.embodiment] if fetch else MAX_OBJECTS
        for goal in (*self.goals, self.video_goal):
            if goal not in GOAL_KINDS:
                raise ValueError(f"unknown goal kind {goal!r}: expected one of {list(GOAL_KINDS)}")
        for n in (*self.n_objects, *(self.tower_heights or ()), self.video_n):
            if not 1 <= n <= most:
                raise ValueError(f"numbers of objects must be in 1 … {most}, got {n}")
        if not self.goals or not self.n_objects:
            raise ValueError("need at least one goal kind and one number of objects")
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        if not 16 <= self.video_size <= 128:
            raise ValueError(f"video_size must be in 16 … 128 pixels, got {self.video_size}")
        if self.video_every < 1:
            raise ValueError(f"video_every must be >= 1, got {self.video_every}")
        check_workers(self.workers)


def evaluate(args: Args) -> list[dict[str, Any]]:
    """Roll out every (goal kind, N) configuration through :func:`ecrl.evaluation.evaluate` (the
    evaluator of every policy; an episode ends at its first success); one summary row per configuration."""
    rows = []
    for goal in args.goals:
        report = evaluate_policy(
            ExpertPolicy,
            args.n_objects,
            goal=goal,
            episodes=args.episodes,
            seed=args.seed,
            stop_on_success=True,
            workers=args.workers,
        )
        for r in report.rows():
            keep = ("n_objects", "episodes", "successes", "success_rate", "success_ci95", "fraction_placed")
            rows.append(
                {
                    "goal": goal,
                    **{k: r[k] for k in keep},
                    **{k: r[k] for k in ("episode_length", "horizon", "wall_s", "steps_per_s")},
                }
            )
    return rows


def expert_table(rows: list[dict[str, Any]]) -> str:
    header = ("goal", "N", "success", "95% CI", "fraction placed", "mean length / horizon", "wall s")
    return markdown_table(
        header,
        (
            (
                r["goal"],
                r["n_objects"],
                *success_cells(r, fraction_placed=False),
                f"{r['fraction_placed']:.2f}",
                f"{r['episode_length']:.0f} / {r['horizon']}",
                f"{r['wall_s']:.2f}",
            )
            for r in rows
        ),
    )


def plot_success(rows: list[dict[str, Any]], path: Path) -> None:
    """Success rate vs number of objects, one line per goal kind, with 95% Wilson error bars."""
    goals = dict.fromkeys(r["goal"] for r in rows)
    episodes = "/".join(map(str, sorted({r["episodes"] for r in rows})))
    plot_success_vs_n(
        {goal: [r for r in rows if r["goal"] == goal] for goal in goals},
        path,
        title=f"Scripted expert ({episodes} episodes per point, 95% Wilson CI)",
        legend_title="goal kind",
    )


def record_media(args: Args, out: Path) -> dict[str, Any]:
    """Write `rollout.gif` (both cameras side by side) and `scene.png` (both cameras + segmentation)."""
    size = args.video_size
    env = gym.make("ecrl/Push-v0", n_objects=args.video_n, goal=args.video_goal, width=size, height=size)
    frames = _Frames(env, args.video_every)
    rollout([env], ExpertPolicy(), [args.seed], recorder=frames, stop_on_success=True)
    env.close()
    gif = out / "rollout.gif"
    gif_bytes = write_gif(gif, frames.frames, fps=20 / args.video_every)

    env = gym.make("ecrl/Push-v0", n_objects=args.video_n, goal=args.video_goal, width=2 * size, height=2 * size)
    env.reset(seed=args.seed)
    base = env.unwrapped
    views, seg = base.render_views(), base.render_segmentation("front")
    env.close()
    save_scene(
        views, seg, 1 + args.video_n, out / "scene.png", title=f"{args.video_goal}, N={args.video_n}, seed {args.seed}"
    )
    return {
        "goal": args.video_goal,
        "n_objects": args.video_n,
        "seed": args.seed,
        "frames": len(frames.frames),
        "gif_bytes": gif_bytes,
        **frames.episode,
    }


class _Frames(Recorder):
    """Camera images of ``env`` at its reset and after every step (every ``every``-th kept), and how its episode went."""

    def __init__(self, env: gym.Env, every: int) -> None:
        self.env, self.every, self.frames, self.calls, self.episode = env, every, [], 0, {}

    def _record(self, info: dict[str, Any], length: int) -> None:
        self.episode = {
            "success": bool(info["is_success"]),
            "fraction_placed": float(info["fraction_placed"]),
            "length": length,
        }
        if self.calls % self.every == 0:
            self.frames.append(camera_strip(self.env.unwrapped.render_views()))
        self.calls += 1

    def start(self, i, seed, obs, info) -> None:
        self._record(info, 0)

    def step(self, s: Step) -> None:
        self._record(s.info, s.t)


def save_scene(views: dict[str, np.ndarray], seg: np.ndarray, n_entities: int, path: Path, title: str) -> None:
    """Both camera views and the segmentation mask `seg: (H, W)` (0 background, 1 agent, `i + 2` object `i`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    n_labels = max(int(seg.max()), n_entities) + 1
    colours = plt.get_cmap("tab10")(np.arange(max(n_labels - 1, 1)) % 10)
    cmap = ListedColormap(np.concatenate([[[0.0, 0.0, 0.0, 1.0]], colours]))
    fig, axes = plt.subplots(1, 3, figsize=(9, 3.3), dpi=110)
    for ax, (name, image) in zip(axes[:2], views.items(), strict=True):
        ax.imshow(image)
        ax.set_title(f"camera '{name}'", fontsize=9)
    axes[2].imshow(seg, cmap=cmap, vmin=0, vmax=max(n_labels - 1, 1), interpolation="nearest")
    axes[2].set_title("segmentation ('front')", fontsize=9)
    names = ["agent", *(f"object {i}" for i in range(n_labels - 2))]
    handles = [Patch(color=cmap(label), label=name) for label, name in enumerate(names, start=1)]
    axes[2].legend(handles=handles, loc="upper left", fontsize=6, framealpha=0.8)
    for ax in axes:
        ax.axis("off")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_readme(path: Path, command: str, rows: list[dict[str, Any]], total_s: float, media: bool) -> None:
    episodes = rows[0]["episodes"]
    lines = [
        *report_header("Scripted expert: success per goal kind and number of objects", command),
        f"{episodes} episodes per row, seeds from `--seed` on; an episode ends at success or at the horizon. "
        "*success*: every object placed (for `ordered`, in order); *fraction placed*: at the episode's end; "
        f"95% CI: Wilson score interval. Total wall-clock {total_s:.0f} s.",
        "",
        expert_table(rows),
        "",
        "![success vs number of objects](success.png)",
    ]
    if media:
        lines += ["", "![rollout](rollout.gif)", "", "![scene](scene.png)"]
    path.write_text("\n".join(lines) + "\n")


def run(args: Args, command: str | None = None) -> dict[str, Any]:
    """Evaluate, write every output to `args.out`, and return what `expert.json` holds."""
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows = evaluate(args)
    total = time.perf_counter() - start
    media = record_media(args, args.out) if args.video else None
    command = command or f"ecrl-expert  # with {asdict(args)}"
    result = {
        "command": command,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items()},
        "results": rows,
        "total_wall_s": total,
        "media": media,
        "provenance": provenance(),
    }
    (args.out / "expert.json").write_text(json.dumps(result, indent=2) + "\n")
    plot_success(rows, args.out / "success.png")
    write_readme(args.out / "README.md", command, rows, total, media is not None)
    return result


def fetch_table(points: list[dict[str, Any]]) -> str:
    header = ("skill", "goal", "N", "success", "95% CI", "placed", "steps", f"still solved {SETTLE_STEPS} steps on")
    rows = (
        (
            p["skill"],
            p["goal"],
            p["n_objects"],
            f"{p['successes']}/{p['episodes']}",
            f"[{p['ci95'][0]:.2f}, {p['ci95'][1]:.2f}]",
            f"{p['fraction_placed']:.2f}",
            f"{p['mean_length']:.0f}",
            f"{p['still_solved_after']['episodes']}/{p['successes']}",
            "–"
            if p["target"] is None
            else f"≥ {p['target']:.0%}: {'met' if p['success_rate'] >= p['target'] else 'NOT met'}",
        )
        for p in points
    )
    return markdown_table((*header, "target"), rows, align="llrrrrrrl")


def run_fetch(args: Args, command: str) -> dict[str, Any]:
    """Evaluate the Fetch expert per (skill, goal kind, N), write `expert.json` and `README.md`, return the record."""
    start = time.perf_counter()
    points = []
    for skill in args.skills:
        for goal in (g for g in args.goals if g in SKILL_GOALS[skill]):
            for n in args.tower_heights if skill == "stack" else args.n_objects:
                p = measure_fetch_expert(skill, goal, n, args.episodes, args.seed, SETTLE_STEPS)
                points.append(p | {"target": FETCH_TARGETS.get((skill, n)) if goal == "positions" else None})
                print(
                    f"{skill:10s} {goal:9s} N={n}: {p['successes']}/{p['episodes']} (failed seeds {p['failed_seeds']})"
                )
    table = fetch_table(points)
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"args": asdict(args) | {"out": str(args.out)}, "command": command, "points": points}
    record |= {"wall_s": time.perf_counter() - start, "provenance": provenance()}
    (args.out / "expert.json").write_text(json.dumps(record, indent=2))
    lines = report_header("Fetch scripted expert", command)
    lines += [f"Episode `e` resets with seed `{args.seed} + e`; success is `info['is_success']` before truncation.", ""]
    (args.out / "README.md").write_text("\n".join([*lines, table, ""]))
    return record


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `ecrl-expert`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = tyro.cli(Args, args=argv, prog="ecrl-expert", description=__doc__)
    command = shlex.join(["ecrl-expert", *argv])
    if args.embodiment == "fetch":
        print(fetch_table(run_fetch(args, command)["points"]))
        print(f"wrote {args.out}/ (expert.json, README.md)")
        return
    result = run(args, command=command)
    print(expert_table(result["results"]))
    outputs = "expert.json, README.md, success.png" + (", rollout.gif, scene.png" if result["media"] else "")
    print(f"wrote {args.out}/ ({outputs})")


if __name__ == "__main__":
    main()
