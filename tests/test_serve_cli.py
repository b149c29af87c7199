"""`visionrt serve` as a command (issue #47): what its start-up says names what `serve` itself
takes (its config's keys; it has no --depth, --depth-on or --realtime), and summary.json holds
every camera it had, removed ones too."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import test_serve
from conftest import HANG_SECONDS
from services import wait_until
from test_serve import WAIT, call

media = test_serve.media  # the fixture, found by name


class Cli:
    """`visionrt serve` in a process of its own, its URL read from stderr."""

    def __init__(self, config: Path, out: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "visionrt.cli.main", "serve", "--config", str(config),
             "--port", "0", "--no-plan", "--out", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True,  # the signal goes to visionrt alone
        )  # fmt: skip
        self.lines: list[str] = []
        self.url = ""
        threading.Thread(target=self._read, daemon=True).start()
        wait_until(lambda: self.url or self.proc.poll() is not None, 120, "the URL on stderr")
        assert self.url, "".join(self.lines)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            match = re.search(r"at (http://127\.0\.0\.1:\d+)/", line)
            if match and not self.url:
                self.url = match.group(1)

    def get(self, path: str) -> Any:
        return call(self.url + path).json()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=HANG_SECONDS)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def cli(tmp_path: Path, tiny_model: Path) -> Iterator[Callable[[str], Cli]]:
    started: list[Cli] = []

    def start(config: str) -> Cli:
        path = tmp_path / "serve.yaml"
        path.write_text(f"model: {tiny_model}\nbackend: onnxruntime\n{config}")
        started.append(Cli(path, tmp_path / "out"))
        return started[-1]

    yield start
    for served in started:
        served.kill()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["depth.on=[door]"], "depth.on names sources for a depth model, and none is given"),
        (["depth.on=[nope]", "depth.model=d.onnx"], "depth.on: no source named 'nope'"),
        (["source.realtime=false", "source.loop=true"], "source.loop: loops a file paced at"),
    ],
    ids=["depth.on without a model", "depth.on naming no source", "loop without realtime"],
)
def test_start_up_messages_name_what_serve_takes(
    tiny_model: Path, media: Path, tmp_path: Path, settings: list[str], message: str
) -> None:
    """Before: "give --depth MODEL", "--depth-on: …", "add --realtime": flags of `run` that
    `serve` does not have."""
    command = [sys.executable, "-m", "visionrt.cli.main", "serve", f"door={media / 'a.mp4'}"]
    for setting in [f"model={tiny_model}", "backend=onnxruntime", *settings]:
        command += ["--set", setting]
    command += ["--no-plan", "--port", "0", "--out", str(tmp_path / "out")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=HANG_SECONDS)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr, done.stderr
    assert not re.search(r"--depth|--realtime", done.stderr), done.stderr


def test_a_file_read_as_fast_as_it_decodes_is_served_to_its_end(
    cli: Callable[[str], Cli], media: Path, tmp_path: Path
) -> None:
    """Before: `source.realtime: false` alone stopped the start ("source.loop: … add
    --realtime": serve looped files whatever their pace, and has no --realtime)."""
    served = cli(f"sources: ['door={media / 'a.mp4'}']\nsource: {{realtime: false}}\n")

    def state() -> str:
        return str(next(r["state"] for r in served.get("/sources") if r["name"] == "door"))

    wait_until(lambda: state() == "ended", WAIT, "door's end")
    assert served.stop() == 0, "".join(served.lines)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["service"]["cameras"][0]["frames_out"] == 40  # every frame, once


def test_summary_json_keeps_the_cameras_removed(
    cli: Callable[[str], Cli], media: Path, tmp_path: Path
) -> None:
    """Before: `service.cameras` held the cameras listed at the end alone, whereas docs/serve.md
    says it holds each camera's last state."""
    served = cli(f"sources: ['door={media / 'a.mp4'}']\nserve: {{files: ['{media}']}}\n")

    def frames_out(name: str) -> int:
        return next((r["frames_out"] for r in served.get("/sources") if r["name"] == name), 0)

    added = call(f"{served.url}/sources", "POST", {"name": "cam2", "uri": str(media / "b.mp4")})
    assert added.status == 201, added
    wait_until(lambda: frames_out("cam2") > 0, WAIT, "cam2's frames")
    assert call(f"{served.url}/sources/cam2", "DELETE").status == 200
    assert call(f"{served.url}/sources/door/restart", "POST").status == 200
    assert served.stop() == 0, "".join(served.lines)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    rows = [(c["name"], c["state"]) for c in summary["service"]["cameras"]]
    assert rows[:2] == [("door", "removed"), ("cam2", "removed")], rows
    assert rows[2:] == [("door", rows[2][1])], rows
    assert rows[2][1] != "removed", "the door restarted runs"
    cam2 = summary["service"]["cameras"][1]
    assert cam2["frames_out"] > 0, "its counts as it was removed"
    assert cam2["uri"] == str(media / "b.mp4")


def test_a_folder_holding_an_earlier_services_outputs_is_refused_unless_overwrite(
    tiny_model: Path, media: Path, tmp_path: Path
) -> None:
    """Before: a second service into the same folder overwrote the first's detections.jsonl and
    summary.json without a word, where docs/serve.md says no file is overwritten; `run`
    refuses such a folder (one rule for every entry point: pipeline.outputs)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text('{"outputs": []}')
    (out / "detections.jsonl").write_text('{"frame": 0}\n')
    command = [sys.executable, "-m", "visionrt.cli.main", "serve", f"door={media / 'a.mp4'}",
               "--set", f"model={tiny_model}", "--set", "backend=onnxruntime", "--no-plan",
               "--port", "0", "--out", str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=HANG_SECONDS)
    assert done.returncode == 2, done.stderr
    assert re.search(
        r"holds another run's outputs \(detections\.jsonl, summary\.json\)", done.stderr
    )
    assert (out / "detections.jsonl").read_text() == '{"frame": 0}\n'  # untouched
    config = tmp_path / "serve.yaml"
    door = media / "a.mp4"
    config.write_text(
        f"model: {tiny_model}\nbackend: onnxruntime\nsources: ['door={door}']\n"
        "output: {overwrite: true}\n"
    )
    served = Cli(config, out)
    try:
        assert any("--overwrite: removed an earlier run's" in line for line in served.lines)
        # Stopped once it runs (a signal before its handlers are in is the start-up's: 130).
        wait_until(lambda: served.get("/sources")[0]["frames_out"] > 0, WAIT, "door's frames")
        assert served.stop() == 0, "".join(served.lines)
    finally:
        served.kill()
    assert json.loads((out / "summary.json").read_text())["service"]["cameras"][0]["name"] == "door"
