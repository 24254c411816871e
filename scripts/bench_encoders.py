"""`ecrl-bench encoders`: how well and how fast object-centric encoders turn camera frames into entities.

For each encoder (a trained checkpoint of `ecrl-train-encoder`, or, without checkpoints, freshly
initialised encoders of every kind, which measures speed only):

* **Decomposition.** Foreground ARI of the encoder's decomposition (each pixel to the entity with
  the largest alpha) against MuJoCo's segmentation, on held-out frames (`--test-dataset`), per
  camera and per number of objects in the scene (`ecrl.encoders.metrics.fg_ari`).
* **Object positions.** Each object is matched to one entity per camera by optimal assignment on
  how much of its true mask the entity covers; an MLP probe, fitted on frames of `--fit-dataset`,
  reads the object's table (x, y) from the matched rows; its error on the held-out frames, in cm.
* **Encoding throughput.** Camera images per second of `encode` (no decoder) at batch
  `--batch` × cameras, on `--threads` threads, best of `--repeats`. The machine is shared, so a
  reference runs in the same process: rendering the same number of 64-px camera images with
  MuJoCo (`PushEnv.render_views`, software EGL); the ratio encode/render is reported too.

Targets (issue 5): best encoder FG-ARI >= 0.9 and position error <= 1 cm on scenes with up to 6
objects at 64 px; encoding >= 500 images/s on this CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from ecrl.encoders.data import Frames
from ecrl.encoders.evaluate import score_encoder
from ecrl.encoders.io import ENCODER_KINDS, build_encoder, load_encoder
from ecrl.encoders.metrics import encode_rate
from ecrl.encoders.train import decomposition_picture
from ecrl.reporting import markdown_table, report_header
from ecrl.timing import time_calls


@dataclass(frozen=True)
class EncodersArgs:
    """Encoder quality (FG-ARI, position-probe error) and encoding images/s."""

    checkpoints: tuple[str, ...] = ()
    """Trained encoders (run directories or checkpoint directories); none: fresh encoders of every kind, speed only."""
    labels: tuple[str, ...] = ()
    """A label per checkpoint (default: its kind)."""
    test_dataset: Path = Path("data/pix-mix-test")
    """Held-out pixel dataset the encoders are scored on."""
    fit_dataset: Path = Path("data/pix-mix")
    """Pixel dataset whose frames the position probe is fitted on."""
    test_frames: int = 1024
    """Held-out frames scored (each has one image per camera)."""
    fit_frames: int = 2048
    """Frames the position probe is fitted on."""
    probe_steps: int = 2000
    """Adam steps of the position probe."""
    batch: int = 64
    """Samples per encode call when timing (each has one image per camera)."""
    repeats: int = 5
    """Timed encode calls per encoder (the best counts) and render rounds of the reference."""
    threads: int = 1
    """torch CPU threads."""
    min_ari: float = 0.9
    """Target: FG-ARI of the best encoder."""
    max_cm: float = 1.0
    """Target: position-probe error of the best encoder, centimetres."""
    min_rate: float = 500.0
    """Target: encoded camera images per second, every encoder."""
    strict: bool = False
    """Exit with status 1 when a target is missed."""
    out: Path = Path("results/bench_encoders")
    """Output directory."""

    def __post_init__(self) -> None:
        if self.labels and len(self.labels) != len(self.checkpoints):
            raise ValueError(
                f"--labels needs one label per checkpoint: {len(self.checkpoints)} checkpoints, {len(self.labels)} labels"
            )
        if min(self.test_frames, self.fit_frames, self.probe_steps, self.batch, self.repeats, self.threads) < 1:
            raise ValueError("test_frames, fit_frames, probe_steps, batch, repeats and threads must be >= 1")


def render_rate(size: int, cameras: tuple[str, ...], images: int, repeats: int) -> float:
    """Camera images per second of MuJoCo rendering a 3-object push scene at ``size`` px (best of ``repeats``)."""
    env = gym.make("ecrl/Push-v0", n_objects=3, width=size, height=size)
    env.reset(seed=0)
    scene = env.unwrapped
    scene.render_views(cameras)  # warm-up: creates the renderer
    frames = max(1, images // len(cameras))
    best = min(time_calls(lambda: scene.render_views(cameras), frames) for _ in range(repeats))
    env.close()
    return len(cameras) / best


def measure(args: EncodersArgs) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    trained = bool(args.checkpoints)
    if trained:
        models = [load_encoder(c) for c in args.checkpoints]
        labels = list(args.labels) or [m.kind for m in models]
        test, fit = Frames(args.test_dataset), Frames(args.fit_dataset)
        views, size, cameras = test.views, test.size, test.cameras
    else:
        views, size, cameras = 2, 64, ("front", "top")
        models = [build_encoder(kind, views=views, image_size=size).eval() for kind in ENCODER_KINDS]
        labels = list(ENCODER_KINDS)
    torch.manual_seed(0)
    images = (
        torch.rand(args.batch, views, 3, size, size)
        if not trained
        else test.batch(np.arange(min(args.batch, len(test))))
    )
    reference = render_rate(size, cameras, args.batch * views, args.repeats)
    rows = []
    for label, model in zip(labels, models, strict=True):
        model.eval()
        rate = encode_rate(model.encode, images, args.repeats)
        row: dict[str, Any] = {
            "label": label,
            "kind": model.kind,
            "checkpoint": args.checkpoints[len(rows)] if trained else None,
            "entities_per_view": model.config.entities,
            "entity_dim": model.entity_dim,
            "parameters": sum(p.numel() for p in model.parameters()),
            "train_steps": getattr(model, "meta", {}).get("steps"),
            "encode_images_per_s": rate,
            "render_images_per_s": reference,
            "encode_vs_render": rate / reference,
        }
        if trained:
            save_decomposition(args.out, label, model, test)
            scores = score_encoder(model, fit, test, args.fit_frames, args.test_frames, probe_steps=args.probe_steps)
            row |= {
                "fg_ari": scores.fg_ari,
                **{f"fg_ari_{c}": v for c, v in scores.fg_ari_per_camera.items()},
                "position_cm": scores.position.mean_cm,
                "position_median_cm": scores.position.median_cm,
                "position_p90_cm": scores.position.p90_cm,
                "recon_mse": scores.recon_mse,
                "scored_frames": scores.frames,
                "scored_objects": scores.position.objects,
                "probe_fit_objects": scores.position.fit_objects,
                "per_n": {str(n): v for n, v in scores.per_n.items()},
                **scores.contact,
                "fg_ari_objects": scores.fg_ari_objects,
                "agent_px": scores.agent_px,
                "agent_particle": model.uses_agent,
            }
        rows.append(row)
    return {"threads": args.threads, "image_size": size, "cameras": list(cameras), "trained": trained, "encoders": rows}


def decomposition_file(label: str) -> str:
    return f"decomposition_{label}.png"


def save_decomposition(out: Path, label: str, model: Any, test: Frames, frames: int = 3) -> None:
    """``out/decomposition_<label>.png``: held-out camera images, their reconstruction, decomposition and
    entity positions (:func:`~ecrl.encoders.train.decomposition_picture`), doubled in size."""
    import imageio.v3 as iio

    picture = decomposition_picture(model, test, np.linspace(0, len(test) - 1, frames).astype(int))
    out.mkdir(parents=True, exist_ok=True)
    iio.imwrite(out / decomposition_file(label), np.kron(picture, np.ones((2, 2, 1), np.uint8)))


def check_targets(args: EncodersArgs, result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = result["encoders"]
    targets = []
    if result["trained"]:
        best_ari = max(rows, key=lambda r: r["fg_ari"])
        best_cm = min(rows, key=lambda r: r["position_cm"])
        targets += [
            {
                "target": f"FG-ARI of the best encoder >= {args.min_ari:g}",
                "value": f"{best_ari['fg_ari']:.3f} ({best_ari['label']})",
                "pass": best_ari["fg_ari"] >= args.min_ari,
            },
            {
                "target": f"position error of the best encoder <= {args.max_cm:g} cm",
                "value": f"{best_cm['position_cm']:.2f} cm ({best_cm['label']})",
                "pass": best_cm["position_cm"] <= args.max_cm,
            },
        ]
    for r in rows:
        targets.append(
            {
                "target": f"{r['label']}: encoding >= {args.min_rate:g} images/s ({result['threads']} thread(s))",
                "value": f"{r['encode_images_per_s']:.0f} images/s",
                "pass": r["encode_images_per_s"] >= args.min_rate,
            }
        )
    return targets


def tables(result: dict[str, Any]) -> str:
    rows = result["encoders"]
    header = ["encoder", "entities/view", "params", "encode images/s", "vs render"]
    body = [
        [
            r["label"],
            r["entities_per_view"],
            f"{r['parameters']:,}",
            f"{r['encode_images_per_s']:.0f}",
            f"{r['encode_vs_render']:.2f}×",
        ]
        for r in rows
    ]
    if result["trained"]:
        header += ["FG-ARI", *[f"FG-ARI {c}" for c in result["cameras"]], "FG-ARI touching / apart (share touching)"]
        header += ["FG-ARI objects only", "agent keypoint px", "position cm (mean / median)", "recon MSE"]
        for line, r in zip(body, rows, strict=True):
            line += [f"{r['fg_ari']:.3f}", *[f"{r[f'fg_ari_{c}']:.3f}" for c in result["cameras"]]]
            line += [f"{r['fg_ari_touching']:.3f} / {r['fg_ari_apart']:.3f} ({r['touching_share']:.0%})"]
            line += [f"{r['fg_ari_objects']:.3f}", "–" if math.isnan(r["agent_px"]) else f"{r['agent_px']:.2f}"]
            line += [f"{r['position_cm']:.2f} / {r['position_median_cm']:.2f}", f"{r['recon_mse']:.5f}"]
    parts = [markdown_table(header, body)]
    if result["trained"]:
        ns = sorted({int(n) for r in rows for n in r["per_n"]})
        per_n = [
            [r["label"], *[f"{r['per_n'][str(n)]['fg_ari']:.3f} / {r['per_n'][str(n)]['position_cm']:.2f}" for n in ns]]
            for r in rows
        ]
        parts.append(
            "FG-ARI / position error (cm) by number of objects in the scene:\n\n"
            + markdown_table(["encoder", *[f"N={n}" for n in ns]], per_n)
        )
    targets = [[t["target"], t["value"], "PASS" if t["pass"] else "FAIL"] for t in result["targets"]]
    parts.append(markdown_table(["target", "value", "result"], targets, align="lrl"))
    return "\n\n".join(parts)


def plot(result: dict[str, Any], args: EncodersArgs, path: Path) -> None:
    """FG-ARI and position error vs number of objects per encoder (trained), and encode images/s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["encoders"]
    panels = 3 if result["trained"] else 1
    fig, axes = plt.subplots(1, panels, figsize=(3.6 * panels, 3.3), dpi=120, squeeze=False)
    axes = axes[0]
    if result["trained"]:
        for r in rows:
            ns = sorted(int(n) for n in r["per_n"])
            axes[0].plot(ns, [r["per_n"][str(n)]["fg_ari"] for n in ns], "o-", label=r["label"])
            axes[1].plot(ns, [r["per_n"][str(n)]["position_cm"] for n in ns], "o-", label=r["label"])
        axes[0].axhline(args.min_ari, color="k", ls=":", label="target")
        axes[1].axhline(args.max_cm, color="k", ls=":", label="target")
        axes[0].set(xlabel="objects in the scene", ylabel="FG-ARI (held-out)", ylim=(0, 1.02))
        axes[1].set(xlabel="objects in the scene", ylabel="position error, cm", ylim=(0, None))
        for ax in axes[:2]:
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
    ax = axes[-1]
    x = np.arange(len(rows))
    ax.bar(x, [r["encode_images_per_s"] for r in rows], 0.6, label="encode")
    ax.axhline(rows[0]["render_images_per_s"], color="tab:gray", ls="--", label="MuJoCo render (reference)")
    ax.axhline(args.min_rate, color="k", ls=":", label="target")
    ax.set(
        xticks=x,
        xticklabels=[r["label"] for r in rows],
        ylabel="camera images / s",
        title=f"{result['threads']} thread(s)",
    )
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_readme(path: Path, command: str, args: EncodersArgs, result: dict[str, Any]) -> None:
    m = result["machine"]
    how = (
        f"Scored on {result['encoders'][0].get('scored_frames')} held-out frames of `{args.test_dataset}` "
        f"({' + '.join(result['cameras'])} cameras, {result['image_size']} px); the position probe (an MLP on the "
        f"matched entity rows of every camera) is fitted on {args.fit_frames} frames of `{args.fit_dataset}`. "
        if result["trained"]
        else "Fresh (untrained) encoders: speed only. "
    )
    lines = [
        *report_header("Object-centric encoders: decomposition, positions, speed", command),
        how
        + f"Encoding: `encode` (no decoder), batch {args.batch} samples × {len(result['cameras'])} cameras, best of "
        f"{args.repeats}; reference: MuJoCo rendering of the same number of images in the same process. torch "
        f"{m['torch']} on {result['threads']} thread(s); machine: {m['cpus']} CPUs, shared with other jobs.",
        "",
        tables(result),
        "",
        f"![FG-ARI, position error and encoding speed]({FIGURE})",
    ]
    for r in result["encoders"] if result["trained"] else []:
        lines += [
            "",
            f"**{r['label']}** on held-out frames; per row one camera image: input, reconstruction, decomposition "
            "(each pixel coloured by the entity with the largest alpha, dimmed where little is explained), entity positions:",
            "",
            f"![{r['label']} decomposition]({decomposition_file(r['label'])})",
        ]
    path.write_text("\n".join(lines) + "\n")


FIGURE = "encoders.png"
