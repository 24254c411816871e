"""Encoder training (``ecrl-train-encoder``), checkpoints, and ``ecrl-bench encoders`` on a tiny pixel dataset."""

import json

import numpy as np
import pytest
import torch
from diffusion_helpers import resume_to_six_steps

from ecrl.checkpoint import CheckpointError
from ecrl.datasets import CollectConfig, collect_dataset
from ecrl.encoders.data import Frames
from ecrl.encoders.io import build_encoder, load_encoder, save_encoder
from ecrl.encoders.train import EncoderTrainConfig, decomposition_image, parse_options, train
from ecrl.scripts.bench import main as bench_main
from ecrl.scripts.train_encoder import main

TINY = {
    "slot": ("width=8", "slot_dim=8", "entities=3", "iterations=2"),
    "particles": ("width=8", "feature_dim=4", "entities=3", "prior_keypoints=4"),
}


@pytest.fixture(scope="module")
def frames_path(tmp_path_factory):
    """Two expert episodes of push-2 with 32-px frames from both cameras."""
    path = tmp_path_factory.mktemp("pix") / "data"
    collect_dataset(path, CollectConfig(n_objects=(2,), episodes=2, pixels=32, idle_steps=2, progress=False))
    return path


def tiny(frames_path, runs, kind="slot", **kwargs) -> EncoderTrainConfig:
    base = {"steps": 4, "batch_size": 4, "warmup": 2, "log_every": 2, "image_every": 2, "eval_every": 2}
    base |= {"eval_frames": 8, "checkpoint_every": 2, "name": "tiny", "progress": False, "threads": 1}
    return EncoderTrainConfig(
        **{**base, "dataset": frames_path, "runs_dir": runs, "kind": kind, "options": TINY[kind], **kwargs}
    )


def test_frames_hold_images_labels_and_positions(frames_path):
    frames = Frames(frames_path)
    assert frames.cameras == ("front", "top") and frames.size == 32
    batch = frames.batch(np.array([0, 3]))
    assert batch.shape == (2, 2, 3, 32, 32) and batch.min() >= 0 and batch.max() <= 1
    assert frames.positions.shape == (len(frames), 2, 2) and (frames.n_objects == 2).all()
    held = Frames(frames_path, episodes=np.array([1]))
    assert len(held) < len(frames) and np.array_equal(held.images, frames.images[len(frames) - len(held) :])


@pytest.mark.parametrize("kind", ["slot", "particles"])
def test_a_run_writes_everything_and_resumes(frames_path, tmp_path, kind):
    result = train(tiny(frames_path, tmp_path, kind))
    run = result.run_dir
    assert result.steps == 4 and np.isfinite(result.loss)
    for name in ("config.json", "provenance.json", "scores.json", "tb/progress.csv", "final/encoder.json"):
        assert (run / name).exists(), name
    scores = json.loads((run / "scores.json").read_text())
    assert -1 <= scores["fg_ari"] <= 1 and scores["position"]["mean_cm"] > 0
    progress = (run / "tb" / "progress.csv").read_text().splitlines()
    assert progress[0].startswith("train/gradient_steps,eval/fg_ari") and len(progress) == 3  # steps 2 and 4
    resume_to_six_steps(tiny(frames_path, tmp_path, kind, steps=6), run, train)


def test_agent_points_are_the_pushers_place_in_each_view(frames_path):
    frames = Frames(frames_path)
    assert frames.agent_points.shape == (len(frames), 2, 2) and frames.agent_points.dtype == np.float32
    misses = []
    for i in range(0, len(frames), 5):
        for v in range(frames.views):
            ys, xs = np.nonzero(frames.segmentation[i, v] == 1)
            if len(xs):
                centre = (np.array([xs.mean(), ys.mean()]) + 0.5) / 16 - 1
                misses.append(np.linalg.norm(frames.agent_points[i, v] - centre) * 16)
    assert len(misses) > 10 and np.median(misses) < 0.5, misses  # pixels at 32 px
    assert frames.agent_batch(np.array([0, 2])).shape == (2, 2, 2)


def test_a_run_with_an_agent_particle_scores_its_keypoint(frames_path, tmp_path):
    options = (*TINY["particles"], "agent_weight=1")
    run = train(tiny(frames_path, tmp_path, "particles", options=options)).run_dir
    scores = json.loads((run / "scores.json").read_text())
    assert 0 <= scores["agent_px"] < 32
    assert "eval/agent_px" in (run / "tb" / "progress.csv").read_text().splitlines()[0]
    assert load_encoder(run / "final").uses_agent


def test_object_points_are_the_objects_places_and_hidden_ones_are_nan(frames_path):
    frames = Frames(frames_path)
    assert frames.object_points.shape == (len(frames), 2, 2, 2) and frames.object_points.dtype == np.float32
    batch = frames.object_batch(np.arange(len(frames))).numpy()
    misses = []
    for i in range(len(frames)):
        for v in range(frames.views):
            for j in range(2):
                ys, xs = np.nonzero(frames.segmentation[i, v] == j + 2)
                if len(xs) >= 4:
                    centre = (np.array([xs.mean(), ys.mean()]) + 0.5) / 16 - 1
                    misses.append(np.linalg.norm(batch[i, v, j] - centre) * 16)
                else:
                    assert np.isnan(batch[i, v, j]).all()  # too few pixels: not supervised
    assert len(misses) > 10 and np.nanmedian(misses) < 1.0, misses  # pixels at 32 px (cubes' tops shift it a bit)


def test_a_run_trains_with_the_object_loss(frames_path, tmp_path):
    options = (*TINY["particles"], "agent_weight=1", "object_weight=1")
    run = train(tiny(frames_path, tmp_path, "particles", options=options)).run_dir
    header = (run / "tb" / "progress.csv").read_text().splitlines()[0]
    assert load_encoder(run / "final").uses_objects and "eval/fg_ari" in header


def test_init_starts_from_a_trained_encoder_and_refuses_another_architecture(frames_path, tmp_path):
    first = train(tiny(frames_path, tmp_path / "a", "particles", lr=1e-2)).run_dir / "final"
    trained = load_encoder(first).state_dict()
    fresh = build_encoder("particles", views=2, image_size=32, **parse_options("particles", TINY["particles"]))
    assert any(not torch.equal(trained[k], v) for k, v in fresh.state_dict().items())  # training moved the weights
    options = (*TINY["particles"], "foreground_weight=5")  # a loss weight may change
    second = train(tiny(frames_path, tmp_path / "b", "particles", init=first, options=options, lr=1e-9, steps=1))
    tuned = load_encoder(second.run_dir / "final").state_dict()
    assert all(torch.allclose(tuned[k], v, atol=1e-6) for k, v in trained.items())  # one step at lr 1e-9
    assert json.loads((second.run_dir / "config.json").read_text())["init"] == str(first)
    wider = ("width=16", *TINY["particles"][1:])
    with pytest.raises(ValueError, match="another architecture"):
        train(tiny(frames_path, tmp_path / "c", "particles", init=first, options=wider))
    with pytest.raises(ValueError, match="'particles' encoder; this run trains a 'slot'"):
        train(tiny(frames_path, tmp_path / "d", "slot", init=first))


def test_checkpoint_round_trip_encodes_identically(tmp_path):
    torch.manual_seed(0)
    model = build_encoder("slot", views=2, image_size=32, entities=3, width=8, slot_dim=8).eval()
    images = torch.rand(2, 2, 3, 32, 32)
    save_encoder(model, tmp_path / "enc", {"note": "test"})
    loaded = load_encoder(tmp_path / "enc")
    assert loaded.meta == {"note": "test"} and not loaded.training
    with torch.no_grad():
        for a, b in zip(model.encode(images), loaded.encode(images), strict=True):
            assert torch.equal(a, b)


def test_a_non_checkpoint_or_foreign_checkpoint_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="not an ecrl encoder checkpoint"):
        load_encoder(tmp_path)
    (tmp_path / "encoder.json").write_text(json.dumps({"format": "ecrl.policy", "version": 1}))
    with pytest.raises(CheckpointError, match="not an ecrl encoder config"):
        load_encoder(tmp_path)


def test_options_are_typed_and_checked():
    assert parse_options("slot", ("slot_dim=16", "iterations=2")) == {"slot_dim": 16, "iterations": 2}
    with pytest.raises(ValueError, match="name=value"):
        parse_options("slot", ("beta_kl=1",))
    with pytest.raises(ValueError, match="not a valid int"):
        parse_options("slot", ("slot_dim=big",))
    with pytest.raises(ValueError, match="comes from the dataset"):
        parse_options("slot", ("image_size=64",))


def test_cli_errors_are_clean(frames_path, tmp_path, capsys, push1_demos):
    with pytest.raises(SystemExit) as exit_info:
        main(["--dataset", str(push1_demos), "--runs-dir", str(tmp_path)])
    assert exit_info.value.code == 2 and "holds no frames" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--dataset", str(frames_path), "--options", "nonsense=1"])
    assert "nonsense=1" in capsys.readouterr().err


def test_decomposition_image_layout():
    b, v, k, p = 2, 2, 3, 8
    picture = decomposition_image(
        np.zeros((b, v, 3, p, p)),
        np.ones((b, v, 3, p, p)),
        np.random.default_rng(0).random((b, v, k, p, p)),
        np.zeros((b, v, k, 2)),
    )
    assert picture.shape == (b * v * p, 4 * p, 3) and picture.dtype == np.uint8
    assert (picture[:, p : 2 * p] == 255).all()  # the reconstruction panel shows the reconstruction


def test_bench_encoders_scores_trained_checkpoints(frames_path, tmp_path, capsys):
    run = train(tiny(frames_path, tmp_path)).run_dir
    out = tmp_path / "bench"
    bench_main(
        ["encoders", "--checkpoints", str(run), "--test-dataset", str(frames_path), "--fit-dataset", str(frames_path)]
        + ["--test-frames", "16", "--fit-frames", "16", "--probe-steps", "20", "--batch", "2", "--repeats", "1"]
        + ["--out", str(out)]
    )
    result = json.loads((out / "bench.json").read_text())
    row = result["encoders"][0]
    assert row["kind"] == "slot" and row["encode_images_per_s"] > 0 and row["render_images_per_s"] > 0
    assert -1 <= row["fg_ari"] <= 1 and row["per_n"]["2"]["frames"] == 16
    assert 0 <= row["touching_share"] <= 1 and "FG-ARI touching / apart" in (out / "README.md").read_text()
    assert [t["target"].split()[0] for t in result["targets"]][:2] == ["FG-ARI", "position"]
    assert (out / "encoders.png").stat().st_size > 0 and "FG-ARI" in (out / "README.md").read_text()
    assert (out / "decomposition_slot.png").stat().st_size > 0
