"""Every CLI a README command names runs through its installed entry point, with its default code paths.

Each test starts the console script (``ecrl-train``, ``ecrl-eval``, …) as a user would, in a fresh
process, at a tiny budget but with what the defaults switch on (progress bars, evaluation at the
end): a dependency that only one of those paths imports (as SB3's progress bar needs ``rich``)
fails here, in CI's fresh install, and not 26 minutes into a user's first run.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def run_cli(name: str, *args: str, cwd: Path) -> str:
    """Run console script ``name`` with ``args``; its stdout + stderr (fails the test with them on error)."""
    exe = BIN / name
    if not exe.exists():
        found = shutil.which(name)
        assert found, f"{name} is not installed (pip install -e . puts it beside {sys.executable})"
        exe = Path(found)
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"), OMP_NUM_THREADS="1")
    done = subprocess.run([str(exe), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{name} {' '.join(args)} exited with {done.returncode}:\n{output[-4000:]}"
    return output


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def dataset(work) -> Path:
    """Two expert episodes of push-1 with 32-px frames, through ``ecrl-collect`` (progress bar on)."""
    out = work / "data" / "push1"
    run_cli("ecrl-collect", "--out", str(out), "--n-objects", "1", "--episodes", "2", "--pixels", "32", cwd=work)
    return out


def test_ecrl_collect_writes_a_dataset(dataset):
    meta = json.loads((dataset / "meta.json").read_text())
    assert meta["episodes"] == 2 and any(dataset.glob("*.npz"))


def test_ecrl_train_with_the_defaults_code_paths(work):
    """The defaults' path: demos, BC, DAgger, RL with SB3's progress bar, periodic and final evaluation."""
    output = run_cli(
        "ecrl-train",
        *("--steps", "60", "--net.width", "8", "--batch-size", "16", "--demos", "2", "--bc-steps", "3"),
        *("--dagger-iterations", "1", "--dagger-episodes", "1", "--dagger-steps", "3", "--actor-warmup", "20"),
        *("--eval-every", "30", "--eval-episodes", "1", "--checkpoint-every", "30"),
        *("--final-eval-objects", "1", "2", "--final-eval-episodes", "1", "--runs-dir", "runs", "--name", "smoke"),
        cwd=work,
    )
    run = work / "runs" / "smoke"
    assert "run directory" in output
    assert {"final", "imitation", "checkpoints", "eval", "tb"} <= {p.name for p in run.iterdir()}
    assert json.loads((run / "checkpoints" / "latest" / "training.json").read_text())["num_timesteps"] == 60
    assert {r["n_objects"] for r in json.loads((run / "eval" / "eval.json").read_text())["results"]} == {1, 2}


def test_ecrl_eval_on_a_trained_run(work):
    run = work / "runs" / "smoke"
    if not run.exists():
        pytest.skip("needs the run of test_ecrl_train_with_the_defaults_code_paths")
    out = work / "eval_out"
    run_cli("ecrl-eval", str(run), "--objects", "1", "--episodes", "1", "--video", "--out", str(out), cwd=work)
    assert {"eval.json", "README.md", "success.png"} <= {p.name for p in out.iterdir()}


def test_ecrl_train_diffusion_then_eval(work, dataset):
    run_cli(
        "ecrl-train-diffusion",
        *("--dataset", str(dataset), "--steps", "4", "--batch-size", "4"),
        *("--denoiser.width", "8", "--denoiser.heads", "1"),
        *("--eval-every", "2", "--eval-episodes", "1", "--eval-objects", "1"),  # periodic evaluation, as the main job
        *("--final-eval-objects", "1", "--final-eval-episodes", "1", "--sampling-steps", "2"),
        *("--runs-dir", "runs", "--name", "diff", "--threads", "1"),
        cwd=work,
    )
    run = work / "runs" / "diff"
    assert (run / "final").is_dir() and (run / "eval" / "eval.json").exists()


def test_ecrl_train_encoder(work, dataset):
    run_cli(
        "ecrl-train-encoder",
        *("--dataset", str(dataset), "--kind", "slot", "--steps", "2", "--batch-size", "2", "--warmup", "1"),
        *("--eval-every", "2", "--eval-frames", "8", "--log-every", "1", "--image-every", "2"),
        *("--runs-dir", "runs", "--name", "enc", "--threads", "1"),
        cwd=work,
    )
    run = work / "runs" / "enc"
    assert (run / "final" / "encoder.json").exists() and (run / "scores.json").exists()


def test_ecrl_expert(work):
    out = work / "expert"
    args = ("--n-objects", "1", "--goals", "positions", "--episodes", "1", "--no-video", "--out", str(out))
    run_cli("ecrl-expert", *args, cwd=work)
    assert json.loads((out / "expert.json").read_text())


def test_ecrl_bench_envs(work):
    out = work / "bench_envs"
    run_cli(
        "ecrl-bench", "envs",
        *("--n-objects", "1", "--steps", "50", "--repeats", "1", "--resets", "5", "--frames", "2"),
        *("--render-sizes", "32", "--no-fetch", "--no-strict", "--out", str(out)),
        cwd=work,
    )  # fmt: skip
    assert (out / "bench_envs.json").exists()


@pytest.mark.parametrize(("script", "given", "expected"), [("eval", None, "egl"), ("collect", "osmesa", "osmesa")])
def test_entry_points_set_mujoco_gl_unless_the_user_did(script, given, expected):
    # ecrl/scripts/__init__.py is the one place it is set: importing any entry point runs it first.
    env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"} | ({"MUJOCO_GL": given} if given else {})
    probe = f"import os, ecrl.scripts.{script}; print(os.environ['MUJOCO_GL'])"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [expected]
