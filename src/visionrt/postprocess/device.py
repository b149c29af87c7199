"""Decode a batch of YOLO-family head outputs where they are (torch, any device): candidates,
class-aware NMS and the map back to source pixels for every image at once, so only the kept
boxes cross to the host.

The same function runs on CPU tensors, where tests hold it to the host decode (`decode_one`):
the same boxes, in the same order. NMS is exact greedy NMS done as a fixed point over the
suppression matrix, one batched step per pass instead of a loop per box (see `_greedy_keep`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from visionrt.postprocess.yolo import HeadLayout, PostprocessOptions
from visionrt.types import Letterbox

# The most candidate pairs one NMS pass holds at once (~24 bytes each in its temporaries: ~400 MB
# at this count); a batch with more is split into groups of images, an image with more goes alone.
MAX_PAIRS = 1 << 24


def _candidates(output: Tensor, layout: HeadLayout, conf: float) -> tuple[Tensor, ...]:
    """(image index, xyxy in input pixels, score, class) of every candidate above `conf`."""
    if layout is HeadLayout.END2END:
        keep = output[..., 4] > conf
        image, anchor = keep.nonzero(as_tuple=True)
        rows = output[image, anchor]
        return image, rows[:, :4], rows[:, 4], rows[:, 5].long()
    if layout is HeadLayout.ANCHOR_FREE_T:
        output, layout = output.transpose(1, 2), HeadLayout.ANCHOR_FREE
    if layout is HeadLayout.ANCHOR_FREE:
        best, classes = output[:, 4:].max(dim=1)  # (B, N)
        image, anchor = (best > conf).nonzero(as_tuple=True)
        boxes = output[image, :4, anchor]
        score, class_id = best[image, anchor], classes[image, anchor]
    else:  # YOLOV5: [B, N, 5 + nc] with objectness
        objectness = output[..., 4]
        image, anchor = (objectness > conf).nonzero(as_tuple=True)
        rows = output[image, anchor]
        score, class_id = (rows[:, 5:] * rows[:, 4:5]).max(dim=1)
        high = score > conf
        image, score, class_id, boxes = image[high], score[high], class_id[high], rows[high, :4]
    half = boxes[:, 2:4] * 0.5
    return image, torch.cat([boxes[:, :2] - half, boxes[:, :2] + half], 1), score, class_id


def suppression(boxes: Tensor, classes: Tensor, valid: Tensor, iou: float) -> Tensor:
    """(B, K, K): box i (better) suppresses box j (worse) — same class, IoU > `iou`, i < j, i a
    real candidate — for (B, K) candidates sorted best first per image."""
    top_left = torch.maximum(boxes[:, :, None, :2], boxes[:, None, :, :2])
    bottom_right = torch.minimum(boxes[:, :, None, 2:], boxes[:, None, :, 2:])
    inter = (bottom_right - top_left).clamp_(min=0).prod(-1)
    area = (boxes[..., 2:] - boxes[..., :2]).clamp(min=0).prod(-1)
    union = area[:, :, None] + area[:, None, :] - inter
    overlap = inter > iou * union  # IoU > iou, with no division (union 0: no overlap)
    count = boxes.shape[1]
    better = torch.ones(count, count, dtype=torch.bool, device=boxes.device).triu_(1)
    suppresses = overlap & better & (classes[:, :, None] == classes[:, None, :])
    return suppresses & valid[:, :, None]


def greedy_pass(suppresses: Tensor, valid: Tensor, keep: Tensor) -> Tensor:
    """One pass of the greedy rule: a candidate is kept when no kept one suppresses it."""
    return valid & ~(suppresses & keep[:, :, None]).any(dim=1)


def _greedy_keep(boxes: Tensor, classes: Tensor, valid: Tensor, iou: float) -> Tensor:
    """Greedy NMS over (B, K) candidates sorted best first per image: a box is kept when no
    kept, better box of its class overlaps it by IoU > `iou`. That rule refers only to better
    boxes, so iterating it from 'all kept' settles one rank deeper per pass and stops at the
    greedy answer exactly (a fixed point of the rule is its only solution); passes are few,
    as chains of suppression are short."""
    suppresses = suppression(boxes, classes, valid, iou)
    keep = valid
    for _ in range(boxes.shape[1] + 1):
        following = greedy_pass(suppresses, valid, keep)
        if torch.equal(following, keep):
            break
        keep = following
    return keep


def _nms_padded(
    image: Tensor,
    boxes: Tensor,
    score: Tensor,
    classes: Tensor,
    images: int,
    options: PostprocessOptions,
) -> Tensor:
    """Indices (into the candidates) kept per image, image by image and best first there."""
    order = torch.argsort(score, descending=True, stable=True)
    order = order[torch.argsort(image[order], stable=True)]
    image_sorted = image[order]
    counts = torch.bincount(image_sorted, minlength=images)
    width = int(counts.max()) if counts.numel() else 0
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(order.numel(), device=order.device) - starts[image_sorted]
    padded_boxes = boxes.new_zeros((images, width, 4))
    padded_boxes[image_sorted, rank] = boxes[order]
    padded_classes = classes.new_full((images, width), -1)
    padded_classes[image_sorted, rank] = classes[order] if not options.agnostic else 0
    valid = torch.zeros((images, width), dtype=torch.bool, device=boxes.device)
    valid[image_sorted, rank] = True
    per_group = max(1, MAX_PAIRS // max(1, width * width))
    keep = (
        torch.cat(
            [
                _greedy_keep(
                    padded_boxes[i : i + per_group],
                    padded_classes[i : i + per_group],
                    valid[i : i + per_group],
                    options.iou,
                )
                for i in range(0, images, per_group)
            ]
        )
        if images
        else valid
    )
    kept_rank = torch.cumsum(keep, 1) - 1
    keep &= kept_rank < options.max_det
    return order[keep[image_sorted, rank]]


def decode_batch_device(
    output: Tensor, layout: HeadLayout, boxes: Sequence[Letterbox], options: PostprocessOptions
) -> list[npt.NDArray[np.float32]]:
    """A batch's raw output (any float dtype, any device) → per image an (N, 6) float32 host
    array of x1, y1, x2, y2 (source pixels, clipped), score and class id, best first: the rows
    `decode_one` gives, with one copy to the host for the whole batch."""
    images = len(boxes)
    if images == 0:
        return []
    output = output[:images].float()
    image, xyxy, score, class_id = _candidates(output, layout, options.conf)
    if options.classes is not None:
        wanted = torch.as_tensor(options.classes, device=class_id.device)
        chosen = torch.isin(class_id, wanted)
        image, xyxy, score, class_id = image[chosen], xyxy[chosen], score[chosen], class_id[chosen]
    if layout is HeadLayout.END2END:
        order = torch.argsort(score, descending=True, stable=True)
        order = order[torch.argsort(image[order], stable=True)]
        counts = torch.bincount(image[order], minlength=images)
        rank = (
            torch.arange(order.numel(), device=order.device)
            - (torch.cumsum(counts, 0) - counts)[image[order]]
        )
        kept = order[rank < options.max_det]
    else:
        kept = _nms_padded(image, xyxy, score, class_id, images, options)
    image, xyxy, score, class_id = image[kept], xyxy[kept], score[kept], class_id[kept]
    # Input pixels → source pixels, per image's letterbox (boxes_to_source, vectorised).
    geometry = torch.tensor(
        [[b.left, b.top, b.scale, b.source_hw[1], b.source_hw[0]] for b in boxes],
        dtype=torch.float32,
    ).to(xyxy.device, non_blocking=True)[image]
    xyxy = xyxy.clone()
    xyxy[:, 0::2] -= geometry[:, 0:1]
    xyxy[:, 1::2] -= geometry[:, 1:2]
    xyxy /= geometry[:, 2:3]
    xyxy[:, 0::2] = torch.minimum(xyxy[:, 0::2].clamp(min=0), geometry[:, 3:4])
    xyxy[:, 1::2] = torch.minimum(xyxy[:, 1::2].clamp(min=0), geometry[:, 4:5])
    rows = torch.cat([xyxy, score[:, None], class_id[:, None].float()], 1)
    counts = torch.bincount(image, minlength=images)
    host = torch.cat([rows.flatten(), counts.float()]).cpu().numpy()  # one copy, one wait
    counts_host = host[rows.numel() :].astype(np.int64)
    table = host[: rows.numel()].reshape(-1, 6)
    return np.split(table, np.cumsum(counts_host)[:-1])
