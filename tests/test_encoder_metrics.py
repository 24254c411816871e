"""Encoder metrics: FG-ARI against a pair-counting definition, object matching, the position probe."""

import itertools
import time

import numpy as np
import pytest
import torch

from ecrl.encoders.metrics import PositionProbe, encode_rate, fg_ari, match_objects, touching


def ari_by_pairs(true: np.ndarray, pred: np.ndarray) -> float:
    """The Rand index adjusted for chance, from its definition over all pairs of foreground pixels."""
    idx = np.flatnonzero(true > 0)
    pairs = list(itertools.combinations(idx, 2))
    same_t = np.array([true[i] == true[j] for i, j in pairs])
    same_p = np.array([pred[i] == pred[j] for i, j in pairs])
    index, a, b, n = (same_t & same_p).sum(), same_t.sum(), same_p.sum(), len(pairs)
    expected = a * b / n
    top = (a + b) / 2
    return 1.0 if top == expected else float((index - expected) / (top - expected))


def one_hot_alpha(pred: np.ndarray, k: int) -> np.ndarray:
    return np.moveaxis(np.eye(k)[pred], -1, 1)


def test_fg_ari_matches_the_pair_counting_definition():
    rng = np.random.default_rng(0)
    true = rng.integers(0, 4, size=(6, 7, 7))
    pred = rng.integers(0, 5, size=(6, 7, 7))
    pred[0] = true[0]  # a perfect split, with the background anywhere
    pred[1] = (true[1] + 2) % 5  # the same split with other entity ids
    got = fg_ari(true, one_hot_alpha(pred, 5))
    want = [ari_by_pairs(t.ravel(), p.ravel()) for t, p in zip(true, pred, strict=True)]
    np.testing.assert_allclose(got, want, atol=1e-9)
    assert got[0] == pytest.approx(1.0) and got[1] == pytest.approx(1.0)


def test_fg_ari_ignores_background_and_handles_degenerate_images():
    true = np.zeros((3, 4, 4), np.int64)
    true[0, :2], true[0, 2:] = 1, 2  # two objects
    true[1, 0, 0] = 1  # one foreground pixel: undefined
    true[2, :2] = 1  # one object, one entity: 1 by convention
    pred = np.zeros((3, 4, 4), np.int64)
    pred[0, :2], pred[0, 2:] = 0, 1
    pred[0, 3, :] = 2  # the background (row 3 is object 2's, so this splits object 2)
    score = fg_ari(true, one_hot_alpha(pred, 3))
    assert 0 < score[0] < 1
    assert np.isnan(score[1]) and score[2] == 1.0
    with pytest.raises(ValueError, match="must agree"):
        fg_ari(true, one_hot_alpha(pred, 3)[:, :, :2])


def test_touching_finds_labels_in_contact_side_by_side_or_stacked():
    labels = np.zeros((5, 5, 5), np.int64)
    labels[0, 1, 1], labels[0, 1, 2] = 1, 2  # side by side
    labels[1, 1, 3], labels[1, 2, 3] = 2, 3  # one above the other
    labels[2, 1, 1], labels[2, 2, 2] = 1, 2  # diagonal neighbours only
    labels[3, 0, 0], labels[3, 4, 4] = 1, 2  # apart
    labels[4, 1:3, 1:3] = 2  # one label alone
    np.testing.assert_array_equal(touching(labels), [True, True, False, False, False])
    with pytest.raises(ValueError, match=r"\(M, H, W\)"):
        touching(labels[0])


def test_objects_are_matched_to_the_entities_that_cover_them():
    seg = np.zeros((1, 2, 4, 4), np.int64)
    seg[0, :, 0, 0], seg[0, :, 3, 3] = 2, 3  # objects 0 and 1 in both views
    alpha = np.zeros((1, 2, 3, 4, 4))
    alpha[0, 0, 2, 0, 0] = alpha[0, 0, 0, 3, 3] = 1
    alpha[0, 1, 1, 0, 0] = alpha[0, 1, 2, 3, 3] = 1
    matches = match_objects(alpha, seg, np.array([2]))
    np.testing.assert_array_equal(matches[0], [[2, 1], [0, 2]])


def test_position_probe_reads_positions_that_are_in_the_rows_and_not_noise():
    rng = np.random.default_rng(0)
    pos = rng.uniform(-0.3, 0.3, (600, 2))
    informative = np.concatenate([pos * 3 + 0.01 * rng.normal(size=pos.shape), rng.normal(size=(600, 4))], 1)
    noise = rng.normal(size=(600, 6))
    good = PositionProbe(steps=600).fit(informative[:400], pos[:400]).score(informative[400:], pos[400:])
    bad = PositionProbe(steps=600).fit(noise[:400], pos[:400]).score(noise[400:], pos[400:])
    assert good.mean_cm < 2.0 < 10.0 < bad.mean_cm
    assert good.objects == 200 and good.fit_objects == 400


def test_probe_features_concatenate_the_matched_rows_of_every_view():
    entities = np.arange(2 * 2 * 3 * 2, dtype=np.float32).reshape(2, 6, 2)  # B=2, V=2, K=3, D=2
    matches = np.array([[[0, 2], [-1, 1]], [[1, 1], [2, 0]]])
    x, which = PositionProbe.features(entities, matches, views=2)
    np.testing.assert_array_equal(which, [[0, 0], [1, 0], [1, 1]])
    np.testing.assert_array_equal(x[0], np.concatenate([entities[0, 0], entities[0, 3 + 2]]))


def test_encode_rate_counts_camera_images():
    # 4 samples x 2 cameras in a call that takes at least 20 ms: at most 400 images/s.
    rate = encode_rate(lambda x: time.sleep(0.02), torch.zeros(4, 2, 3, 8, 8), repeats=2)
    assert 200 < rate <= 400
