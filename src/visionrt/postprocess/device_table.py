"""The device decode in fixed shapes, so a CUDA graph can hold it with the model: no host syncs,
no shapes that depend on the data. Per image the TOP best candidates go through PASSES of the
greedy NMS rule (`device.greedy_pass`), are ranked and mapped to source pixels, and come back
as one table; its last row says how many rows were kept, how many candidates there were and
whether the passes settled. An image whose candidates overflow the table or whose NMS has not
settled is decoded again the exact way (`decode_batch_device`) — otherwise the table holds the
same rows, in the same order (tests compare them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from visionrt.postprocess.device import greedy_pass, suppression
from visionrt.postprocess.yolo import HeadLayout, PostprocessOptions
from visionrt.types import Letterbox

# Candidates above the threshold an image keeps for NMS: the demo detector had at most 36 at
# conf 0.25 and 266 at 0.001 over vtest; more sends the image down the exact path.
TOP = 256
# Greedy passes: the demo detector's NMS settled within 6 at any threshold.
PASSES = 12
GEOMETRY = 5  # left, top, scale, width, height of each image's letterbox


def geometry_rows(boxes: list[Letterbox]) -> npt.NDArray[np.float32]:
    """Each letterbox as a GEOMETRY row, for `TableDecoder`'s `geometry` input."""
    rows = [[b.left, b.top, b.scale, b.source_hw[1], b.source_hw[0]] for b in boxes]
    return np.asarray(rows, np.float32).reshape(len(boxes), GEOMETRY)


@dataclass(eq=False)
class TableDecoder:
    """`(outputs, buffers)` → `[table, raw]`: the model's raw output decoded into a
    (B, top + 1, 6) table (rows x1, y1, x2, y2, score, class in source pixels, kept rows first;
    last row kept, candidates, settled), with `buffers["geometry"]` (B, GEOMETRY) the images'
    letterboxes. Constant tensors are made before any capture (`prepare`)."""

    layout: HeadLayout
    options: PostprocessOptions
    top: int = TOP
    passes: int = PASSES
    _classes: Tensor | None = field(default=None, init=False)

    def prepare(self, device: torch.device) -> None:
        wanted = self.options.classes
        if wanted is not None and self._classes is None:
            self._classes = torch.as_tensor(wanted, dtype=torch.long, device=device)

    def __call__(self, outputs: list[Tensor], buffers: dict[str, Tensor]) -> list[Tensor]:
        raw = outputs[0]
        geometry = buffers["geometry"][: raw.shape[0]]
        return [self.table(raw, geometry), raw]

    def table(self, raw: Tensor, geometry: Tensor) -> Tensor:
        boxes, score, class_id, passed = self._scored(raw.float())
        count = passed.sum(dim=1)
        top = min(self.top, score.shape[1])
        masked = torch.where(passed, score, torch.full_like(score, -torch.inf))
        order = torch.sort(masked, dim=1, descending=True, stable=True).indices[:, :top]
        valid = torch.gather(passed, 1, order)
        boxes = torch.gather(boxes, 1, order[..., None].expand(-1, -1, 4))
        score, class_id = torch.gather(score, 1, order), torch.gather(class_id, 1, order)
        if self.layout is HeadLayout.END2END:
            keep, settled = valid, torch.ones_like(count, dtype=torch.bool)
        else:
            half = boxes[..., 2:4] * 0.5
            boxes = torch.cat([boxes[..., :2] - half, boxes[..., :2] + half], dim=2)
            keep, settled = self._nms(boxes, class_id, valid)
        keep &= torch.cumsum(keep, dim=1) <= self.options.max_det
        xyxy = self._to_source(boxes, geometry)
        rows = torch.cat([xyxy, score[..., None], class_id[..., None].float()], dim=2)
        first = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)  # kept rows first
        rows = torch.gather(rows, 1, first[..., None].expand(-1, -1, 6))
        last = torch.zeros_like(rows[:, :1])
        last[:, 0, 0], last[:, 0, 1], last[:, 0, 2] = keep.sum(1), count, settled.float()
        return torch.cat([rows, last], dim=1)

    def _scored(self, out: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Per anchor: box (cx, cy, w, h; x1, y1, x2, y2 for END2END), score, class, and
        whether it passes the threshold and the class filter — as decode_one decides."""
        conf, layout = self.options.conf, self.layout
        if layout is HeadLayout.END2END:
            score, class_id = out[..., 4], out[..., 5].long()
            boxes, passed = out[..., :4], score > conf
        else:
            if layout is HeadLayout.ANCHOR_FREE_T:
                out, layout = out.transpose(1, 2), HeadLayout.ANCHOR_FREE
            if layout is HeadLayout.ANCHOR_FREE:
                score, class_id = out[:, 4:].max(dim=1)
                boxes, passed = out[:, :4].transpose(1, 2), score > conf
            else:  # YOLOV5: objectness first, then its class score
                score, class_id = (out[..., 5:] * out[..., 4:5]).max(dim=2)
                boxes, passed = out[..., :4], (out[..., 4] > conf) & (score > conf)
        if self._classes is not None:
            passed = passed & (class_id[..., None] == self._classes).any(dim=-1)
        return boxes, score, class_id, passed

    def _nms(self, boxes: Tensor, class_id: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
        """Greedy NMS in `passes` passes, and per image whether they settled."""
        classes = torch.zeros_like(class_id) if self.options.agnostic else class_id
        suppresses = suppression(boxes, classes, valid, self.options.iou)
        keep = valid
        for _ in range(self.passes):
            keep = greedy_pass(suppresses, valid, keep)
        settled = (greedy_pass(suppresses, valid, keep) == keep).all(dim=1)
        return keep, settled

    @staticmethod
    def _to_source(boxes: Tensor, geometry: Tensor) -> Tensor:
        """Input pixels → source pixels, clipped (boxes_to_source, per image's geometry)."""
        left, top, scale = geometry[:, None, 0:1], geometry[:, None, 1:2], geometry[:, None, 2:3]
        width, height = geometry[:, None, 3:4], geometry[:, None, 4:5]
        x = (boxes[..., 0::2] - left) / scale
        y = (boxes[..., 1::2] - top) / scale
        x = torch.minimum(x.clamp(min=0), width)
        y = torch.minimum(y.clamp(min=0), height)
        return torch.stack([x[..., 0], y[..., 0], x[..., 1], y[..., 1]], dim=2)


def read_table(table: npt.NDArray[np.float32], top: int) -> list[npt.NDArray[np.float32] | None]:
    """Each image's kept rows from a table on the host, or None where the image must be decoded
    the exact way (its candidates overflowed the table, or its NMS had not settled)."""
    rows: list[Any] = []
    for image in table:
        kept, count, settled = image[-1, :3]
        exact = count <= top and settled == 1
        rows.append(np.ascontiguousarray(image[: int(kept)]) if exact else None)
    return rows
