"""A lane: one task's part of the stage graph (its input buffers, the inbox its batches are
taken from, its inference workers' count), and the stage names it reports under."""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from typing import Any

from visionrt.config.pipeline import PipelineOptions
from visionrt.frames import Pinning
from visionrt.pipeline.flow import Flow, Job
from visionrt.pipeline.inbox import Inboxes
from visionrt.tasks.base import Task

LARGE_BUFFER = 64 * 2**20  # bytes of one frame's input above which a lane keeps few of them


class Lane:
    """One task's part of the graph: its input buffers, the inbox its batches are taken from
    (one per source, so batches mix cameras round-robin), and its inference workers.

    The first lane's stage names are the plain ones ("infer"); others are prefixed with the
    task's name ("depth_infer")."""

    def __init__(
        self,
        index: int,
        task: Task,
        live: bool,
        options: PipelineOptions,
        flow: Flow,
        prefix: str | None = None,
        on_room: Callable[[], None] | None = None,
    ) -> None:
        self.index, self.task = index, task
        self.i420 = bool(getattr(task, "takes_i420", False))  # given Frame.pixels as decoded
        # Registers a worker's ring where the task's device copies frames from it (FrameSlot).
        self.pinning: Pinning | None = getattr(task, "pinning", None)
        self.concurrency = max(1, task.backend.concurrency)
        # Live: a frame or two waits per source at most, so latency cannot build up. Large
        # buffers (a 4K frame's tiles: ~160 MB) wait one per source: memory, not speed, binds.
        per_source = self.concurrency * task.batch if live else options.queue_size
        if task.new_buffer().nbytes > LARGE_BUFFER:
            per_source = min(per_source, 1)
        self.inbox: Inboxes[Job] = Inboxes(per_source, flow.aborting, on_room=on_room)
        pool = per_source + 2 * self.concurrency * task.batch + 2
        self.buffers = [task.new_buffer() for _ in range(pool)]
        self.geometry: list[Any] = [None] * pool
        # SimpleQueue: the buffer slots are taken and given back for every frame, and
        # queue.Queue's conditions cost a notify each time with nobody waiting.
        self.free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slot in range(pool):
            self.free.put(slot)
        if prefix is None:
            prefix = "" if index == 0 else f"{task.name}_"
        self.stage = {s: prefix + s for s in ("preprocess", "prepared", "infer", "postprocess")}


def numbered(tasks: Sequence[Task], index: int) -> str | None:
    """The stage prefix of a task whose name an earlier lane's task has ("detect2_"), so that
    each lane's stages have names of their own; None: the lane's own (Lane)."""
    name = tasks[index].name
    earlier = sum(task.name == name for task in tasks[:index])
    return f"{name}{earlier + 1}_" if earlier else None
