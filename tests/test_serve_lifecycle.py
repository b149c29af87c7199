"""Issue #32: a service's cameras over their whole life. A camera removed or ended leaves no
thread behind."""

from __future__ import annotations

import gc
import threading
from pathlib import Path
from typing import Any

import pytest
import test_serve
from services import wait_until
from test_serve import WAIT

media, serving = test_serve.media, test_serve.serving  # the fixtures, found by name


@pytest.mark.parametrize("removed", [True, False], ids=["removed", "ended"])
def test_file_sources_leave_no_thread_behind(serving: Any, media: Path, removed: bool) -> None:
    """Before: each file source added and then removed kept FFmpeg's decoder threads (3 per
    source on 2 cores) for as long as the service ran; one that ended on its own kept them
    even when removed after."""
    import psutil

    process = psutil.Process()
    served = serving(loop=removed)  # not looped, each file ends by itself
    uri = str(media / "b.mp4")

    def add_and_end(name: str) -> None:
        assert served.post("/sources", {"name": name, "uri": uri}).status == 201
        source_id = served.service.cameras[name].source_id
        wait_until(lambda: served.lines_of(source_id) > 0, WAIT, f"{name} decoding")
        if removed:
            assert served.delete(f"/sources/{name}").status == 200
        graph = served.pipeline.graph
        assert graph is not None
        graph.readers[source_id].join(WAIT)
        assert not graph.readers[source_id].is_alive(), f"{name}'s reader did not end"

    def native() -> int:  # threads Python does not know of: FFmpeg's, the runtimes'
        return process.num_threads() - threading.active_count()

    add_and_end("b0")  # the API's worker threads started
    gc.collect()  # what earlier tests left to collect goes now, not while this one counts
    python_threads, native_threads = threading.active_count(), native()
    for round_ in range(1, 7):
        add_and_end(f"b{round_}")
    gc.collect()
    # The API's thread pool may grow by a thread or two (and drops idle ones).
    assert threading.active_count() <= python_threads + 2, threading.enumerate()
    assert native() <= native_threads + 1, f"{native_threads} threads before"
