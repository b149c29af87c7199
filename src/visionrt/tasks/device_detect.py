"""A detector's frames on its backend's device: staged once, letterboxed, run and decoded there,
so only each frame's kept boxes come back (the 'frames' input form; DetectTask's host path
letterboxes into float32 arrays and decodes the whole raw output on the host).

The decoding is the fixed-shape table (postprocess.device_table), run after the model in its
CUDA graph, so a batch is a few launches and one copy back; an image the table cannot hold
exactly (too many candidates, NMS not settled in its passes) is decoded again the exact way
from the same raw output (postprocess.device)."""

from __future__ import annotations

from typing import cast

import numpy as np
import numpy.typing as npt
import torch

from visionrt.backends.base import Backend, FramesBackend
from visionrt.postprocess import HeadLayout, PostprocessOptions
from visionrt.postprocess.device import decode_batch_device
from visionrt.postprocess.device_table import GEOMETRY, TableDecoder, geometry_rows, read_table
from visionrt.preprocess import compute_letterbox
from visionrt.preprocess.device import (
    FrameSlot,
    letterbox_slots,
    letterbox_staged,
    one_layout,
    pinning_for,
    prepare_staged,
)
from visionrt.tasks.base import warm_up_device
from visionrt.types import Detections

NO_ROWS = np.zeros((0, 6), np.float32)


def _pinned(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.uint8, pin_memory=True)


class DeviceDetect:
    """`backend` takes frames (BackendInfo.input_form FRAMES). A CUDA device gets each frame
    copied into pinned memory on the preprocess thread, so the upload is one DMA; a stand-in
    (the null backend on the CPU) copies as for a device and skips the device's work."""

    def __init__(
        self,
        backend: Backend,
        head: HeadLayout,
        input_hw: tuple[int, int],
        postprocess: PostprocessOptions,
    ) -> None:
        self.backend = cast(FramesBackend, backend)
        self.head, self.input_hw, self.postprocess = head, input_hw, postprocess
        self.device = torch.device(backend.info.device)
        self.stand_in = self.backend.stand_in
        self._stage = self.device.type != "cpu" or self.stand_in
        self._allocate = _pinned if self.device.type == "cuda" else None
        # A worker's ring is registered with it, and its frames go up from there (FrameSlot).
        self.pinning = pinning_for(self.device, self.stand_in)
        self._contexts = max(1, backend.concurrency)
        self.table = TableDecoder(head, postprocess)
        self.table.prepare(self.device)
        self.exact_rows = 0  # images decoded again the exact way (tests read it)

    def new_slot(self) -> FrameSlot:
        return FrameSlot(self._stage, self._allocate)

    def infer(self, slots: list[FrameSlot]) -> list[npt.NDArray[np.float32]]:
        """Each slot's kept boxes: (N, 6) x1, y1, x2, y2 (source pixels), score, class."""
        boxes = [slot.box for slot in slots]
        with self.backend.device_scope(), torch.inference_mode():
            if self.stand_in:  # the call still happens: its delay and fault injection count
                self.backend.infer_device(self.backend.device_input(len(slots)))
                return [NO_ROWS] * len(slots)
            # First: a copy from pageable memory waits for the stream's work queued before it.
            geometry = self.backend.device_buffer(
                "geometry", len(slots), (GEOMETRY,), torch.float32
            )
            geometry.copy_(torch.from_numpy(geometry_rows(boxes)))  # type: ignore[arg-type]
            images = self._prepare(slots)
            table, raw = self.backend.infer_device(images, then=self.table)
            rows = read_table(table.cpu().numpy(), table.shape[1] - 1)
            if any(r is None for r in rows):
                exact = decode_batch_device(raw, self.head, boxes, self.postprocess)  # type: ignore[arg-type]
                self.exact_rows += sum(r is None for r in rows)
                rows = [e if r is None else r for r, e in zip(rows, exact, strict=True)]
            return rows  # type: ignore[return-value]

    def _prepare(self, slots: list[FrameSlot]) -> torch.Tensor:
        """The batch letterboxed into the model's input: one camera size in one box through
        `prepare_staged` (a CUDA graph where graphs are on), others as `letterbox_slots`."""
        layout = one_layout(slots)
        if layout is None:
            images = self.backend.device_input(len(slots))
            letterbox_slots(slots, images)
            return images
        box = layout[1]
        assert box is not None, "a detector's slot holds its letterbox"
        return prepare_staged(
            self.backend, slots, box, lambda staged, images: letterbox_staged(staged, box, images)
        )

    @staticmethod
    def decode(rows: npt.NDArray[np.float32]) -> Detections:
        return Detections(
            np.ascontiguousarray(rows[:, :4]),
            np.ascontiguousarray(rows[:, 4]),
            rows[:, 5].astype(np.int32),
        )

    def warm_up(self, batch: int, calls: int) -> None:
        """`calls` full batches of grey frames at the input size, after a batch of every power
        of two below it in every device context (calls go round them): a backend that
        captures CUDA graphs per batch size does so here, before the run, never two at once."""
        height, width = self.input_hw
        blank = np.full((height, width, 3), 114, np.uint8)
        box = compute_letterbox((height, width), self.input_hw)
        slots = [self.new_slot() for _ in range(batch)]
        for slot in slots:
            slot.hold(blank, box)
        warm_up_device(self.infer, slots, calls, self._contexts)
