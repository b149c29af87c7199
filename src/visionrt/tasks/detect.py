"""A YOLO-family detector as a task: the model's facts, its input buffers, inference, decoding."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from visionrt.backends import Backend, BackendOptions, load_backend
from visionrt.backends.base import FRAMES
from visionrt.backends.registry import check_reads, find_row
from visionrt.errors import ConfigError
from visionrt.frames import Pinning
from visionrt.models import (
    SELF_DESCRIBING,
    ModelSpec,
    read_model_spec,
    resolve_model,
    spec_from_backend,
)
from visionrt.postprocess import HeadLayout, PostprocessOptions, detect_layout
from visionrt.postprocess.yolo import decode_one
from visionrt.preprocess import InputLayout, compute_letterbox, letterbox_into
from visionrt.tasks.base import batch_buffers, out_of_memory_as
from visionrt.types import Detections, Letterbox, picture_hw

if TYPE_CHECKING:
    from visionrt.preprocess.device import FrameSlot
    from visionrt.tasks.device_detect import DeviceDetect

# The largest detector input side. A 4K frame (3840×2160) fits whole; YOLOv8s took ~50 MB of
# activations per 640×640 image in ONNX Runtime on the CPU (peak RSS, batch 8 and 32), which
# grows with the pixels: ~2 GB per image at 4096×4096, ~500 GB at 64000. Larger frames are what
# tiling (--tile) is for.
MAX_INPUT_SIDE = 4096


class DetectTask:
    """A detector loaded into a backend. Model facts (input size and layout, head, class names,
    batch) are derived here once, from the file and from what the runtime reports.

    `backend` "" picks the runtime that reads the file; a loaded Backend can be shared by several
    tasks in turn (its caller closes it). A backend that takes frames (BackendInfo.input_form)
    gets them whole and letterboxed on its device, and decodes there (tasks.device_detect),
    unless `frames` is False (a caller that fills the host buffers itself: tiles, regions)."""

    name = "detect"

    def __init__(
        self,
        model: str | Path,
        backend: str | Backend = "",
        backend_options: BackendOptions | None = None,
        postprocess: PostprocessOptions | None = None,
        frames: bool = True,
    ) -> None:
        model = Path(model)
        options = backend_options or BackendOptions()
        self.postprocess = postprocess or PostprocessOptions()
        # ONNX and IR files describe themselves before any runtime loads; .pt/.engine files are
        # described by the runtime that reads them.
        if isinstance(backend, str) and backend not in ("", "auto"):
            check_reads(find_row(backend), model)  # before reading: name the right runtime
        spec = read_model_spec(model) if model.suffix in SELF_DESCRIBING else None
        stride = spec.stride if spec else 32
        if options.input_size and any(d < stride or d % stride for d in options.input_size):
            raise ConfigError(
                f"inference.input_size: expected height and width multiples of {stride} (the"
                f" detector's stride), got {list(options.input_size)}"
            )
        if options.input_size and max(options.input_size) > MAX_INPUT_SIDE:
            raise ConfigError(
                f"inference.input_size: expected sides of at most {MAX_INPUT_SIDE} pixels (a 4K"
                f" frame fits whole; --tile for larger frames), got {list(options.input_size)}"
            )
        self.batch_rewritten, not_rewritten = False, ""
        self.owns_backend = isinstance(backend, str)
        # What a warm-up that runs out of memory suggests; TiledDetectTask says its own.
        self.memory_fix = "lower --batch or --imgsz"
        self.backend: Backend
        if isinstance(backend, str):
            # The runtime gets a file of the shape asked for: an ONNX export with its batch axis
            # fixed at 1 (users' exports often are) rewritten for any batch, a static detector
            # rewritten for another input size (cached copies). A model that cannot be
            # rebatched still loads, and the check below says why its batch is refused.
            resolved = resolve_model(
                model, options.input_size, options.batch, options.cache_dir, spec=spec
            )
            spec, self.batch_rewritten = resolved.spec, resolved.batch_rewritten
            if resolved.not_rebatched:
                not_rewritten = (
                    f"; it cannot be rewritten for another batch: {resolved.not_rebatched}"
                )
            options = replace(options, input_size=resolved.input_size)
            size = "x".join(map(str, options.input_size or spec.input_size)) if spec else ""
            loading = f"loading {model.name} at batch {options.batch} {size}".rstrip()
            with out_of_memory_as(loading, self.memory_fix):
                self.backend = load_backend(backend, resolved.path, options)
        else:
            self.backend = backend
        info = self.backend.info
        self.spec: ModelSpec = spec or spec_from_backend(model, info)
        self.class_names = self.spec.class_names
        self.input_name = info.inputs[0].name
        in_shape = info.inputs[0].shape
        folded = info.inputs[0].dtype == "uint8"
        self.layout = InputLayout.NHWC_U8_BGR if folded else InputLayout.NCHW_FLOAT
        self.device: DeviceDetect | None = None
        hw = in_shape[1:3] if folded else in_shape[2:4]
        static = all(isinstance(d, int) and d > 0 for d in hw)
        self.input_hw: tuple[int, int] = (
            (int(cast(int, hw[0])), int(cast(int, hw[1])))
            if static
            else options.input_size or self.spec.input_size
        )
        out_shape = [d if isinstance(d, int) else -1 for d in info.outputs[0].shape]
        self.head = detect_layout(
            out_shape,
            len(self.class_names),
            self.spec.end2end,
            self.postprocess.head,
            input_hw=self.input_hw,
        )
        self._check_classes(out_shape)
        if frames and info.input_form == FRAMES:
            from visionrt.tasks.device_detect import DeviceDetect  # torch: imported when used

            self.layout = InputLayout.FRAMES
            self.device = DeviceDetect(self.backend, self.head, self.input_hw, self.postprocess)
        self.batch = options.batch
        self._batches = batch_buffers(
            in_shape[0],
            self.batch,
            f"inference.batch: {info.runtime} runs this model with its batch axis fixed at"
            f" {{fixed}}, got {self.batch} (export with a dynamic batch){not_rewritten}",
        )

    def _check_classes(self, out_shape: list[int]) -> None:
        """`postprocess.classes` must name classes this model has (ids 0 to count - 1)."""
        wanted = self.postprocess.classes
        if not wanted:
            return
        count = len(self.class_names)
        if not count:  # no names: the head's own width says it, when static
            width = {
                HeadLayout.ANCHOR_FREE: (1, 4),
                HeadLayout.ANCHOR_FREE_T: (2, 4),
                HeadLayout.YOLOV5: (2, 5),
            }.get(self.head)
            if width is None or len(out_shape) != 3 or out_shape[width[0]] <= width[1]:
                return  # an end-to-end head (rows of class ids) does not say
            count = out_shape[width[0]] - width[1]
        outside = [c for c in wanted if not 0 <= c < count]
        if outside:
            names = f" ({', '.join(self.class_names)})" if self.class_names else ""
            raise ConfigError(
                f"postprocess.classes: class {outside[0]} is not in this model: expected ids 0"
                f" to {count - 1} of its {count} classes{names}"
            )

    def new_buffer(self) -> Any:
        """One batch row of input: (1, 3, H, W) float32, (1, H, W, 3) uint8 when folded, or a
        FrameSlot when the frames go to the device whole."""
        if self.device is not None:
            return self.device.new_slot()
        height, width = self.input_hw
        if self.layout is InputLayout.NHWC_U8_BGR:
            return np.empty((1, height, width, 3), np.uint8)
        return np.empty((1, 3, height, width), np.float32)

    @property
    def takes_i420(self) -> bool:
        """`prepare` takes I420 pixels too (`Frame.pixels`): the device converts them."""
        return self.device is not None

    @property
    def pinning(self) -> Pinning | None:
        """How a worker's ring is made the device's to copy frames from (None: not needed)."""
        return self.device.pinning if self.device is not None else None

    def prepare(
        self,
        image: npt.NDArray[np.uint8],
        buffer: npt.NDArray[Any] | FrameSlot,
        last: Letterbox | None,
    ) -> Letterbox:
        """Letterbox `image` into `buffer` (one batch row); `last` is the geometry the buffer
        holds already (its padding is then kept). Returns the geometry to map boxes back."""
        box = compute_letterbox(picture_hw(image), self.input_hw)
        # `new_buffer` made the row: a FrameSlot exactly when the frames go to the device.
        if self.device is not None:
            cast("FrameSlot", buffer).hold(image, box)
        else:
            row = cast("npt.NDArray[Any]", buffer)
            letterbox_into(image, row[0], box, self.layout, fill_padding=last != box)
        return box

    def infer(self, rows: list[Any]) -> Any:
        """Run prepared rows as one batch; returns the raw output, one row per input row (or,
        for frames decoded on the device, each row's kept boxes)."""
        if self.device is not None:
            try:
                return self.device.infer(rows)
            finally:
                for slot in rows:
                    slot.let_go()  # the frames went up: their memory (a ring slot) goes back
        tensor = self._batches.fill(rows)
        return self.backend.infer({self.input_name: tensor})[0]

    def decode(self, output: npt.NDArray[np.float32], box: Letterbox) -> Detections:
        """One row of raw output → Detections in source pixels."""
        if self.device is not None:
            return self.device.decode(output)
        return decode_one(output, self.head, box, self.postprocess)

    def drain_events(self) -> dict[str, int]:
        """No events of its own."""
        return {}

    def warm_up(self, calls: int) -> None:
        """`calls` inferences of a full batch of blank rows; out of memory is one ConfigError
        naming the batch and size."""
        height, width = self.input_hw
        what = f"detector warm-up at batch {self.batch} of {height}x{width}"
        with out_of_memory_as(what, self.memory_fix):
            if self.device is not None:
                self.device.warm_up(self.batch, calls)
                return
            blank = np.zeros_like(self.new_buffer())
            if self.batch > 1:
                blank = np.repeat(blank, self.batch, axis=0)
            for _ in range(calls):
                self.backend.infer({self.input_name: blank})

    def describe(self) -> dict[str, Any]:
        """What ran, for the run summary."""
        info = self.backend.info
        return {
            "runtime": info.runtime,
            "version": info.version,
            "device": info.device,
            "precision": info.precision,
            "input_hw": list(self.input_hw),
            "batch": self.batch,
            "concurrency": self.backend.concurrency,
            "batch_rewritten": self.batch_rewritten,
            **info.details,
        }

    def close(self) -> None:
        if self.owns_backend:
            self.backend.close()
