"""A cluster's retried source resumes with its fusion state (issue #32, items 1 and 2): its tracks
keep their ids, its zones and lines their counts, as if no worker had been lost. Through real
Pipelines on thread workers, one of which dies mid-file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_video

from visionrt.config import load_config
from visionrt.distributed.local import ThreadExecutor
from visionrt.distributed.run import run_on_cluster, worker_settings
from visionrt.distributed.units import Group
from visionrt.distributed.worker import Send, run_group
from visionrt.pipeline import pipeline_for

MIDDLE = {
    "lines": {"mid": [[64, 0], [64, 96]]},
    "zones": {"left": [[0, 0], [64, 0], [64, 96], [0, 96]]},
}


def crossing_run(tmp_path: Path, model: Path, video: bool, every: int) -> dict[str, Any]:
    """A tracked run over 120 frames of write_video's square, which crosses the middle of the
    128×96 frames once a pass (about 37 frames) and wraps round: a new track each pass; the
    detector on every `every`-th frame."""
    clip = write_video(tmp_path / "walk.mp4", frames=120)
    return {
        "sources": [f"walk={clip}"],
        "model": str(model),
        "backend": "onnxruntime",
        "output": {"dir": str(tmp_path / "cluster"), "video": video, "mot": True},
        "pipeline": {"warmup": 0, "track": True, "detect_every": every},
        "analytics": {"walk": MIDDLE},
    }


def plain_outputs(values: dict[str, Any], out: Path) -> tuple[Any, dict[str, str]]:
    """A plain run's summary and its JSONL and MOT file, as `visionrt run` writes them."""
    from visionrt.pipeline.outputs import make_sinks

    cfg = load_config(values={**values, "output": {**values["output"], "dir": str(out)}})
    pipeline = pipeline_for(cfg)
    try:
        summary = pipeline.run(make_sinks(cfg, pipeline))
    finally:
        pipeline.close()
    return summary, {name: (out / name).read_text() for name in ("walk.jsonl", "walk.mot.txt")}


@pytest.mark.parametrize(
    ("video", "every"),
    [(False, 1), (False, 3), (True, 1)],
    ids=["resumed", "resumed-detecting-every-3rd-frame", "run-again-for-its-video"],
)
def test_a_source_whose_worker_dies_keeps_its_track_ids_and_line_counts(
    tmp_path: Path, follower_model: Path, video: bool, every: int
) -> None:
    """Issue #32, items 1 and 2: a worker killed mid-file, its source resumed on another. The
    resumed worker started a fresh tracker (ids from 1 again, given to other objects: the MOT
    file merged identities) and fresh zones and lines (the line's totals back to 0). Now the
    source resumes with the fusion state of its last committed frame, and the JSONL, the MOT
    file and the summary's figures are a plain run's. With an MP4 the attempt runs again from
    the first frame (its video holds every frame): the state is its own then, not restored.
    Detecting every third frame, the resumed source detects on the frames a plain run does."""
    values = crossing_run(tmp_path, follower_model, video, every)
    cfg = load_config(values=values)
    died: list[int] = []
    # Batches hold 32 frames at most: the first track (frames 0-37) is committed whole, and
    # the source resumes in the second's.
    summary, report = _run_killed_at_frame_70(cfg, died)
    assert died, "the first attempt ran to its end"
    assert report.reassignments == 1
    assert summary.error == ""
    alone, expected = plain_outputs(values, tmp_path / "plain")
    assert alone.analytics["walk"]["lines"]["mid"] == {"in": 0, "out": 3}
    got = {name: (tmp_path / "cluster" / name).read_text() for name in expected}
    ids = [
        [row["track_id"] for row in json.loads(line)["detections"]]
        for line in got["walk.jsonl"].splitlines()
    ]
    assert ids == [
        [row["track_id"] for row in json.loads(line)["detections"]]
        for line in expected["walk.jsonl"].splitlines()
    ]
    assert got == expected
    assert summary.analytics == alone.analytics
    assert summary.events == alone.events
    assert summary.sources[0]["events"] == alone.sources[0]["events"]


def test_a_source_whose_worker_dies_after_its_last_frame_keeps_its_figures(
    tmp_path: Path, follower_model: Path
) -> None:
    """The worker is lost once every frame was committed, before it said it was done: the
    retry, resumed after the file's last frame, failed the source as the user's error
    ("source.start_frame 120: past the end of 'walk.mp4'", exit 3) and its figures were lost.
    Now it has nothing left to run, and the summary's line totals and events are the whole
    file's, as its checkpoint holds them."""
    values = crossing_run(tmp_path, follower_model, video=False, every=1)
    cfg = load_config(values=values)
    settings = worker_settings(cfg)

    def dies_at_the_end(group: Group, send: Send) -> dict:
        summaries = run_group(group, settings, send)
        if group[0].attempt == 1:
            raise RuntimeError("worker lost")
        return summaries

    executor = ThreadExecutor(1, dies_at_the_end)
    try:
        summary, report = run_on_cluster(cfg, executor)
    finally:
        executor.close()
    assert report.reassignments == 1
    assert summary.error == ""
    assert (summary.frames_in, summary.frames_out) == (120, 120)
    alone, _ = plain_outputs(values, tmp_path / "plain")
    assert summary.analytics == alone.analytics
    assert summary.events == alone.events


def test_a_file_with_smoothed_depth_runs_again_from_its_first_frame(
    tmp_path: Path, follower_model: Path, tiny_depth: Path
) -> None:
    """Depth smoothing blends each map with the ones before: a retry resumed at its frame
    started the blend over, and the depth figures and distances of the frames after it were
    not a plain run's. Its history is a map per frame, too much to send with each batch, so
    such a file's retry runs again from its first frame (sending only the frames after the
    last committed): the JSONL is a plain run's."""
    values = crossing_run(tmp_path, follower_model, video=False, every=1)
    values["depth"] = {"model": str(tiny_depth), "smoothing": 0.8, "video": False}
    values["depth"]["short_side"] = 56
    cfg = load_config(values=values)
    starts: list[int] = []
    summary, report = _run_killed_at_frame_70(cfg, [], starts)
    assert report.reassignments == 1
    assert (summary.error, summary.frames_out) == ("", 120)
    assert starts[1] > 0
    assert report.sources["walk"].duplicates == 0  # the frames before it were not sent
    _, expected = plain_outputs(values, tmp_path / "plain")
    assert (tmp_path / "cluster" / "walk.jsonl").read_text() == expected["walk.jsonl"]


def _run_killed_at_frame_70(
    cfg: Any, died: list[int], starts: list[int] | None = None
) -> tuple[Any, Any]:
    """`cfg` on a one-worker cluster whose first attempt dies at the batch that reaches frame
    70 (its first frame appended to `died`; each attempt's start frame to `starts`)."""
    settings = worker_settings(cfg)

    def dies_mid_file(group: Group, send: Send) -> dict:
        if starts is not None:
            starts.append(group[0].start_frame)

        def sent(unit_id: int, *batch: Any) -> None:
            if group[0].attempt == 1 and batch[0][-1][0] >= 70:
                died.append(batch[0][0][0])
                raise RuntimeError("worker lost")
            send(unit_id, *batch)

        return run_group(group, settings, sent)

    executor = ThreadExecutor(1, dies_mid_file)
    try:
        return run_on_cluster(cfg, executor)
    finally:
        executor.close()
