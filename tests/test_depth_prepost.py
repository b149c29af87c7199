"""Depth pre- and postprocessing on hand cases: input sizing and normalization, the map back
at source size, box distances, the fidelity metric, temporal smoothing and the flicker metric."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from visionrt.errors import ConfigError
from visionrt.fidelity.depth import depth_fidelity, depth_flicker
from visionrt.fuse.depth import DepthSmoother, box_distance
from visionrt.postprocess.depth import align_scale_shift, depth_to_source, nonfinite_rows
from visionrt.preprocess.depth import IMAGENET_MEAN, IMAGENET_STD, depth_input_size, depth_into
from visionrt.types import DepthMap

# -- input size and normalization ------------------------------------------------------------


@pytest.mark.parametrize(
    ("source_hw", "short_side", "expected"),
    [
        ((480, 640), 518, (518, 686)),  # 640 × 518/480 = 690.7 → 49 patches
        ((720, 1280), 266, (266, 476)),  # 472.9 → 34 patches
        ((640, 480), 364, (490, 364)),  # portrait: the short side is the width
        ((100, 100), 518, (518, 518)),
        ((1080, 1920), 364, (364, 644)),  # 647.1 → 46 patches
    ],
)
def test_input_size_keeps_aspect_in_multiples_of_14(
    source_hw: tuple[int, int], short_side: int, expected: tuple[int, int]
) -> None:
    size = depth_input_size(source_hw, short_side)
    assert size == expected
    assert all(d % 14 == 0 for d in size)
    assert min(size) == short_side
    aspect = source_hw[1] / source_hw[0]
    assert abs(size[1] / size[0] - aspect) <= 7 / min(size)  # at most half a patch off


@pytest.mark.parametrize("short_side", [0, 500, 13])
def test_input_size_refuses_a_short_side_off_the_patch_grid(short_side: int) -> None:
    with pytest.raises(ConfigError, match="multiple of 14"):
        depth_input_size((480, 640), short_side)


def test_normalization_on_a_hand_case() -> None:
    image = np.zeros((14, 28, 3), np.uint8)
    image[..., 2] = 255  # pure red in BGR
    image[:, 14:, 1] = 51  # right half: green 0.2
    out = np.full((3, 14, 28), np.nan, np.float32)
    geometry = depth_into(image, out, (14, 28))
    assert geometry.source_hw == (14, 28)
    assert geometry.input_hw == (14, 28)
    mean, std = IMAGENET_MEAN, IMAGENET_STD
    np.testing.assert_allclose(out[0], (1 - mean[0]) / std[0], rtol=1e-6)  # R first
    np.testing.assert_allclose(out[1, :, :14], (0 - mean[1]) / std[1], rtol=1e-6)
    np.testing.assert_allclose(out[1, :, 14:], (0.2 - mean[1]) / std[1], rtol=1e-6)
    np.testing.assert_allclose(out[2], (0 - mean[2]) / std[2], rtol=1e-6)


def test_prepare_resizes_into_the_buffer_and_records_the_source_size() -> None:
    image = np.full((30, 40, 3), 128, np.uint8)
    out = np.full((3, 28, 42), np.nan, np.float32)
    geometry = depth_into(image, out, (28, 42))
    assert geometry.source_hw == (30, 40)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out[0], (128 / 255 - IMAGENET_MEAN[0]) / IMAGENET_STD[0], 1e-5)


# -- back to the source, distances -----------------------------------------------------------


@pytest.mark.parametrize("shape", [(14, 28), (1, 14, 28), (1, 1, 14, 28)])
def test_depth_goes_back_to_the_source_size(shape: tuple[int, ...]) -> None:
    raw = np.full(shape, 2.5, np.float32)
    depth = depth_to_source(raw, (30, 61), metric=True, recomputed=True)
    assert depth.values.shape == (30, 61)
    assert depth.values.dtype == np.float32
    np.testing.assert_allclose(depth.values, 2.5)
    assert depth.metric
    assert depth.recomputed
    assert depth.units == "metres"


def test_a_raw_output_that_is_not_a_map_is_refused() -> None:
    with pytest.raises(ConfigError, match="expected an"):
        depth_to_source(np.zeros((2, 14, 28), np.float32), (30, 60))


def test_nonfinite_rows_names_each_bad_row() -> None:
    batch = np.ones((3, 4, 5), np.float32)
    batch[1, 2, 3] = np.nan
    batch[2, 0, 0] = np.inf
    assert nonfinite_rows(batch).tolist() == [False, True, True]


def _halves() -> DepthMap:
    """100 × 200: 1.0 on the left half, 3.0 on the right half, NaN in a 20×20 patch."""
    values = np.ones((100, 200), np.float32)
    values[:, 100:] = 3.0
    values[0:20, 170:190] = np.nan
    return DepthMap(values)


@pytest.mark.parametrize(
    ("box", "expected"),
    [
        ((10, 10, 90, 90), 1.0),  # inside the left half
        ((110, 30, 190, 90), 3.0),  # inside the right half
        ((-60, 20, 40, 80), 1.0),  # partly outside: clipped to x 0..40
        ((150, -50, 250, 150), 3.0),  # partly outside on three sides
        ((170, 0, 190, 20), np.nan),  # only NaN inside
        ((300, 10, 400, 90), np.nan),  # wholly outside the frame
        ((50, 50, 50, 60), np.nan),  # empty
    ],
)
def test_box_distance_on_a_known_map(box: tuple[float, ...], expected: float) -> None:
    got = box_distance(_halves(), np.array([box], np.float32))
    assert got.dtype == np.float32
    assert got.shape == (1,)
    np.testing.assert_equal(got[0], np.float32(expected))


def test_box_distance_takes_the_inner_part_of_the_box() -> None:
    values = np.full((100, 100), 9.0, np.float32)  # background
    values[30:70, 30:70] = 2.0  # the object fills the central half of the box below
    got = box_distance(DepthMap(values), np.array([[10, 10, 90, 90]], np.float32))
    assert got[0] == 2.0
    whole = box_distance(DepthMap(values), np.array([[10, 10, 90, 90]], np.float32), inner=1.0)
    assert whole[0] == 9.0  # over the whole box the background dominates


def test_box_distance_of_no_boxes_is_empty() -> None:
    assert box_distance(_halves(), np.zeros((0, 4), np.float32)).shape == (0,)


# -- fidelity --------------------------------------------------------------------------------


def _reference() -> np.ndarray:
    rng = np.random.default_rng(1)
    return rng.uniform(0.2, 5.0, (40, 60)).astype(np.float32)


def test_identical_maps_are_perfect() -> None:
    ref = _reference()
    result = depth_fidelity(ref, ref)
    assert result.abs_rel == pytest.approx(0, abs=1e-6)
    assert result.delta1 == 1.0
    assert result.pixels == ref.size


@pytest.mark.parametrize("inverse", [True, False])
def test_a_scaled_and_shifted_copy_is_perfect_after_alignment(inverse: bool) -> None:
    ref = _reference()
    prediction = (ref - 0.3) / 2.5
    scale, shift = align_scale_shift(prediction, ref)
    assert scale == pytest.approx(2.5, rel=1e-6)
    assert shift == pytest.approx(0.3, abs=1e-5)
    result = depth_fidelity(prediction, ref, inverse=inverse)
    assert result.abs_rel == pytest.approx(0, abs=1e-5)
    assert result.delta1 == 1.0


def test_a_wrong_map_scores_worse() -> None:
    ref = _reference()
    noisy = ref * np.random.default_rng(2).uniform(0.5, 1.5, ref.shape).astype(np.float32)
    result = depth_fidelity(noisy, ref)
    assert 0.05 < result.abs_rel < 1.0
    assert 0 < result.delta1 < 1.0


def test_fidelity_ignores_pixels_without_a_positive_reference() -> None:
    ref = _reference()
    ref[:10] = 0.0  # a ReLU output's zeros: no depth there
    ref[10, 0] = np.nan
    result = depth_fidelity(ref * 3.0, ref)
    assert result.pixels == ref.size - 10 * 60 - 1
    assert result.abs_rel == pytest.approx(0, abs=1e-5)


# -- temporal smoothing and flicker ----------------------------------------------------------


def _scene(seed: int = 5) -> np.ndarray:
    """A smooth 60 × 80 inverse-depth scene in (0.5, 2.5)."""
    ys, xs = np.mgrid[0:60, 0:80].astype(np.float32)
    rng = np.random.default_rng(seed)
    return (1.5 + 0.6 * np.sin(xs / 9) * np.cos(ys / 7) + 0.1 * rng.random((60, 80))).astype(
        np.float32
    )


def test_smoothing_off_returns_the_map_itself() -> None:
    depth = DepthMap(_scene())
    assert DepthSmoother(0.0).smooth(0, depth, 0.0) is depth


@pytest.mark.parametrize("alpha", [-0.1, 1.0, 1.5])
def test_smoothing_refuses_an_alpha_outside_0_1(alpha: float) -> None:
    with pytest.raises(ConfigError, match="0 <= alpha < 1"):
        DepthSmoother(alpha)


def test_a_rescaled_copy_of_the_previous_map_passes_unchanged() -> None:
    """Relative depth: the previous map is aligned to the current one first, so a new scale and
    shift alone is not blended toward the old scale (without alignment it would be)."""
    scene = _scene()
    aligned, raw = DepthSmoother(0.5), DepthSmoother(0.5, align=False)
    for smoother in (aligned, raw):
        smoother.smooth(0, DepthMap(scene), 0.0)
    current = DepthMap(3.0 * scene + 0.5, recomputed=True)
    out = aligned.smooth(0, current, 0.04)
    np.testing.assert_allclose(out.values, current.values, rtol=1e-5)
    assert out.recomputed
    assert not out.metric
    unaligned = raw.smooth(0, current, 0.04).values
    np.testing.assert_allclose(unaligned, 0.5 * current.values + 0.5 * scene, rtol=1e-5)


def test_metric_maps_are_blended_without_alignment() -> None:
    smoother = DepthSmoother(0.25)
    smoother.smooth(0, DepthMap(np.full((4, 4), 2.0, np.float32), metric=True))
    out = smoother.smooth(0, DepthMap(np.full((4, 4), 4.0, np.float32), metric=True))
    np.testing.assert_allclose(out.values, 0.75 * 4.0 + 0.25 * 2.0)
    assert out.metric


def test_smoothing_lowers_flicker_on_a_noisy_sequence_and_keeps_the_scale() -> None:
    rng = np.random.default_rng(6)
    scene = _scene()
    smoother = DepthSmoother(0.5)
    raw, smoothed = [], []
    for index in range(12):
        scale, shift = 1.0 + 0.2 * np.sin(index), 0.1 * index  # the model's drift
        noisy = (scene + rng.normal(0, 0.05, scene.shape)).astype(np.float32)
        frame = DepthMap((scale * noisy + shift).astype(np.float32))
        raw.append(frame.values)
        smoothed.append(smoother.smooth(0, frame, index / 25).values)
        fit_scale, _ = align_scale_shift(smoothed[-1], frame.values)
        assert fit_scale == pytest.approx(1.0, abs=0.1)  # the current frame's scale is kept
    raw_flicker = np.mean([depth_flicker(a, b) for a, b in itertools.pairwise(raw)])
    smooth_flicker = np.mean([depth_flicker(a, b) for a, b in itertools.pairwise(smoothed[1:])])
    # EMA with alpha 0.5 over independent noise: the steady-state step is about 1/√3 of raw.
    assert smooth_flicker < 0.7 * raw_flicker


@pytest.mark.parametrize(
    ("second_shape", "second_time"),
    [((60, 80), 1.0), ((30, 40), 3.0)],  # the timestamp goes backwards; the size changes
)
def test_history_starts_over_on_a_jump_back_or_a_new_size(
    second_shape: tuple[int, int], second_time: float
) -> None:
    smoother = DepthSmoother(0.5)
    smoother.smooth(0, DepthMap(_scene()), 2.0)
    fresh = DepthMap(np.random.default_rng(7).random(second_shape).astype(np.float32))
    assert smoother.smooth(0, fresh, second_time) is fresh


def test_each_source_has_its_own_history_and_reset_forgets_it() -> None:
    smoother = DepthSmoother(0.5, align=False)
    smoother.smooth(0, DepthMap(np.full((4, 4), 1.0, np.float32)))
    other = DepthMap(np.full((4, 4), 9.0, np.float32))
    assert smoother.smooth(1, other) is other  # source 1 has no history yet
    blended = smoother.smooth(0, DepthMap(np.full((4, 4), 3.0, np.float32)))
    np.testing.assert_allclose(blended.values, 2.0)
    smoother.reset(0)
    again = DepthMap(np.full((4, 4), 5.0, np.float32))
    assert smoother.smooth(0, again) is again


def test_nan_in_the_history_gives_way_and_nan_in_the_current_map_stays() -> None:
    smoother = DepthSmoother(0.5, align=False)
    first = np.full((4, 4), 1.0, np.float32)
    first[0, 0] = np.nan
    smoother.smooth(0, DepthMap(first))
    second = np.full((4, 4), 3.0, np.float32)
    second[3, 3] = np.nan
    out = smoother.smooth(0, DepthMap(second)).values
    assert out[0, 0] == 3.0
    assert np.isnan(out[3, 3])
    assert out[1, 1] == 2.0


def test_flicker_ignores_scale_and_shift_and_counts_changes_of_shape() -> None:
    scene = _scene()
    assert depth_flicker(scene, 2.0 * scene - 0.3) == pytest.approx(0, abs=1e-6)
    bumped = scene.copy()
    bumped[:30] += 0.2  # half the map moves by 0.2
    change = depth_flicker(scene, bumped)
    assert 0.02 < change < 0.2 / scene.mean()
    static = np.zeros(scene.shape, np.bool_)
    static[30:] = True  # only the half that did not move
    assert depth_flicker(scene, bumped, static) == pytest.approx(0, abs=1e-6)
    assert np.isnan(depth_flicker(scene, bumped, np.zeros(scene.shape, np.bool_)))
