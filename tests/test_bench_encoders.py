"""The encoder benchmark's measurement (:mod:`ecrl.encoders.bench`) called directly, tiny encoders and data.

What is checked is the structure and consistency of the numbers, never how fast anything is.
"""

import pytest

from ecrl.datasets import CollectConfig, collect_dataset
from ecrl.encoders.bench import EncodersBenchConfig, decomposition_file, measure, render_rate
from ecrl.encoders.io import ENCODER_KINDS, build_encoder, save_encoder


def test_fresh_encoders_of_every_kind_are_timed_against_rendering(tmp_path):
    result = measure(EncodersBenchConfig(batch=2, repeats=1, out=tmp_path))
    assert not result["trained"] and result["threads"] == 1
    assert (result["image_size"], result["cameras"]) == (64, ["front", "top"])
    rows = result["encoders"]
    assert [r["label"] for r in rows] == [r["kind"] for r in rows] == list(ENCODER_KINDS)
    reference = rows[0]["render_images_per_s"]
    for r in rows:
        assert r["checkpoint"] is None and "fg_ari" not in r  # speed only
        assert r["parameters"] > 0 and r["entities_per_view"] > 0 and r["entity_dim"] > 0
        assert r["encode_images_per_s"] > 0 and r["render_images_per_s"] == reference > 0
        assert r["encode_vs_render"] == pytest.approx(r["encode_images_per_s"] / reference)
    assert not list(tmp_path.iterdir())  # no decomposition pictures without trained encoders


def test_a_checkpoint_is_scored_on_held_out_frames_and_its_decomposition_saved(tmp_path):
    data = tmp_path / "pix"
    collect_dataset(data, CollectConfig(n_objects=(1,), episodes=1, pixels=32, idle_steps=2, progress=False))
    options = {"width": 8, "slot_dim": 8, "entities": 3, "iterations": 1}
    save_encoder(build_encoder("slot", views=2, image_size=32, **options), tmp_path / "slot")  # untrained
    out = tmp_path / "out"
    config = EncodersBenchConfig(
        checkpoints=(str(tmp_path / "slot"),),
        labels=("tiny",),
        test_dataset=data,
        fit_dataset=data,
        test_frames=8,
        fit_frames=8,
        probe_steps=5,
        batch=2,
        repeats=1,
        out=out,
    )
    result = measure(config)
    assert result["trained"] and (result["image_size"], result["cameras"]) == (32, ["front", "top"])
    (row,) = result["encoders"]
    assert (row["label"], row["kind"], row["checkpoint"]) == ("tiny", "slot", str(tmp_path / "slot"))
    assert row["entities_per_view"] == 3 and row["encode_images_per_s"] > 0
    assert -1 <= row["fg_ari"] <= 1 and -1 <= row["fg_ari_front"] <= 1 and -1 <= row["fg_ari_top"] <= 1
    assert row["position_cm"] > 0 and row["scored_frames"] == 8 and set(row["per_n"]) == {"1"}
    assert (out / decomposition_file("tiny")).stat().st_size > 0


def test_render_rate_counts_camera_images():
    assert render_rate(32, ("front", "top"), images=4, repeats=2) > 0


@pytest.mark.parametrize(
    "kwargs", [{"checkpoints": ("a",), "labels": ("x", "y")}, {"batch": 0}, {"repeats": 0}, {"threads": 0}]
)
def test_encoders_config_refuses_bad_settings(kwargs):
    with pytest.raises(ValueError):
        EncodersBenchConfig(**kwargs)
