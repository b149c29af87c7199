"""A monocular depth model (Depth Anything v2 layout) as a task: its input size, buffers,
inference with a NaN/Inf guard, and decoding to a DepthMap at source resolution."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from visionrt.backends import Backend, BackendOptions, load_backend
from visionrt.backends.base import FRAMES
from visionrt.backends.registry import ROWS, check_reads, find_row, row_for_file
from visionrt.errors import ConfigError, ModelLoadError, NonFiniteDepthError, VisionRTError
from visionrt.frames import Pinning
from visionrt.models import SELF_DESCRIBING, model_metadata, read_model_spec, resolve_model
from visionrt.postprocess.depth import depth_to_source, nonfinite_rows
from visionrt.preprocess.depth import PATCH, depth_input_size, depth_into
from visionrt.tasks.base import batch_buffers, out_of_memory_as
from visionrt.types import DepthGeometry, DepthMap, picture_hw

ON_NONFINITE = ("recompute", "fail")
# The telemetry event `drain_events` reports, one per decoded frame that was recomputed.
RECOMPUTED_EVENT = "depth: non-finite recomputed in fp32"
# The largest input short side. The ViT's attention holds a (patches × patches) matrix per head,
# so memory grows with the 4th power of the side. Depth Anything v2-Small in ONNX Runtime on the
# CPU, one 4:3 frame, peak RSS: 0.5 GB at 518 (1,813 patches), 1.3 GB at 770, 3.8 GB at 1036
# (7,326 patches); 2800 would need ~190 GB. 1036 is twice the size the model was trained at.
MAX_SHORT_SIDE = 74 * PATCH
# The most patches per frame: a 16:9 frame at MAX_SHORT_SIDE (74 × 132), ~6.5 GB by the same
# measure; wider frames need a smaller short side.
MAX_PATCHES = 74 * 132
DEPTH_SIZE_FIX = "use a smaller --depth-size (518, 364 or 266)"


def not_depth_reason(out_shape: Sequence[int], input_hw: tuple[int, int] | None) -> str:
    """Why an output of `out_shape` (-1 for dynamic axes) is not a depth map of an input of
    `input_hw` (None: dynamic), or "". A depth map is [N, H, W] or [N, 1, H, W], dynamic with
    the input, or of the input's aspect when both are static (a detector's [1, 84, 8400] is
    neither)."""
    dims = list(out_shape)
    if len(dims) == 4 and dims[1] in (1, -1):
        dims = [dims[0], *dims[2:]]
    if len(dims) != 3:
        return f"its output {list(out_shape)} is not a depth map [N, H, W]"
    height, width = dims[1:]
    if input_hw is None and max(height, width) > 0:
        return f"its output {list(out_shape)} has a fixed size for an input of any size"
    if input_hw is None or min(height, width, *input_hw) <= 0:
        return ""
    if abs(height / width - input_hw[0] / input_hw[1]) > 0.1 * input_hw[0] / input_hw[1]:
        return (
            f"its output {list(out_shape)} is not a depth map of its"
            f" {input_hw[0]}x{input_hw[1]} input"
        )
    return ""


@dataclass(frozen=True, slots=True)
class DepthRow:
    """One frame's raw depth, (H, W) float32 at the model's input size (a host array, or a
    tensor left on the device by DeviceDepth), and whether it had to be recomputed in FP32.
    `infer` returns these so the flag travels with the row."""

    values: Any  # npt.NDArray[np.float32] | torch.Tensor: torch is imported only with a device
    recomputed: bool = False


class DepthTask:
    """A depth model loaded into a backend.

    Input size: a model with static H and W runs at them. A dynamic one runs at
    `backend_options.input_size` when given, else at `depth_input_size(source_hw, short_side)`
    (short side `short_side`, the other keeping `source_hw`'s aspect, both multiples of 14), or
    `short_side` × `short_side` without `source_hw`. The size is fixed here, before any frame,
    because the pipeline allocates input buffers (`new_buffer`) before frames arrive and
    OpenVINO compiles a static shape; a frame of another aspect is still right, only stretched
    to that size and stretched back.

    NaN/Inf guard: `infer` checks every output row. With `on_nonfinite` "recompute", a row with
    NaN/Inf is run again through an FP32 backend of the same runtime and file (loaded at the
    first such row) and its DepthMap says `recomputed`; with "fail" (or when the backend runs
    FP32 already, or FP32 gives NaN/Inf too) NonFiniteDepthError stops the run. `nonfinite`
    and `recomputed` count rows; they are read by the run summary (`describe`);
    `drain_events` gives the pipeline the recomputed frames decoded since its last call.

    `metric` None reads the model's `depth` metadata ('metric …' → True), else relative."""

    name = "depth"

    def __init__(
        self,
        model: str | Path,
        backend: str | Backend = "",
        backend_options: BackendOptions | None = None,
        short_side: int = 518,
        on_nonfinite: str = "recompute",
        source_hw: tuple[int, int] | None = None,
        metric: bool | None = None,
    ) -> None:
        self.model = Path(model)
        if on_nonfinite not in ON_NONFINITE:
            raise ConfigError(
                f"depth.on_nonfinite: expected recompute or fail, got '{on_nonfinite}'"
            )
        self.on_nonfinite = on_nonfinite
        options = backend_options or BackendOptions()
        if isinstance(backend, str) and backend not in ("", "auto"):
            check_reads(find_row(backend), self.model)
        meta = model_metadata(self.model) if self.model.suffix in SELF_DESCRIBING else {}
        self.architecture_only = meta.get("architecture_only", "").lower() == "true"
        self.metric = meta.get("depth", "").startswith("metric") if metric is None else metric
        spec = read_model_spec(self.model) if self.model.suffix in SELF_DESCRIBING else None
        if spec is not None:
            static = None if spec.dynamic_hw else spec.input_size
            self._check_is_depth(spec.output_shape, static, spec.class_names)
        static_hw = None if spec is None or spec.dynamic_hw else spec.input_size
        if static_hw is not None:
            if options.input_size and tuple(options.input_size) != static_hw:
                raise ConfigError(
                    f"depth input size {list(options.input_size)}: {self.model.name} is exported"
                    f" at a fixed {static_hw[0]}x{static_hw[1]}; export it with dynamic H/W"
                )
            self.input_hw = static_hw
            # Nothing to reshape; and OpenVINO refuses any input_size for an IR (.xml), which
            # is what `visionrt export --to openvino-int8` makes of a depth model.
            options = replace(options, input_size=None)
        elif options.input_size:
            self.input_hw = (int(options.input_size[0]), int(options.input_size[1]))
        else:
            self.input_hw = depth_input_size(source_hw or (short_side, short_side), short_side)
        if any(d < PATCH or d % PATCH for d in self.input_hw):
            raise ConfigError(
                f"depth input size: expected height and width multiples of {PATCH} (the ViT"
                f" patch), got {list(self.input_hw)}"
            )
        self._check_patches(self.input_hw)
        if static_hw is None:
            options = replace(options, input_size=self.input_hw)
        self.options = options
        # The file of the size above that the runtime loads: the model itself, as a static one
        # keeps its size and a dynamic one is fixed by the runtime; batch 1, not rewritten (the
        # check below refuses a fixed batch).
        resolved = resolve_model(self.model, options.input_size, 1, options.cache_dir, spec)
        self._load_path = resolved.path
        self.owns_backend = isinstance(backend, str)
        self.backend: Backend
        if isinstance(backend, str):
            size = f"{self.input_hw[0]}x{self.input_hw[1]}"
            with out_of_memory_as(f"loading {self.model.name} at {size}", DEPTH_SIZE_FIX):
                self.backend = load_backend(backend, self._load_path, self.options)
        else:
            self.backend = backend
        info = self.backend.info
        self.input_name = info.inputs[0].name
        in_shape = info.inputs[0].shape
        height, width = in_shape[2:4]
        if isinstance(height, int) and isinstance(width, int) and height > 0 and width > 0:
            self.input_hw = (height, width)  # what the runtime actually runs
        if spec is None:  # a .pt or .engine: what the runtime reports
            out_shape = [d if isinstance(d, int) else -1 for d in info.outputs[0].shape]
            self._check_is_depth(out_shape, self.input_hw, info.details.get("class_names") or ())
        self.batch = options.batch
        self._batches = batch_buffers(
            in_shape[0],
            self.batch,
            f"depth batch {self.batch}: {info.runtime} runs {self.model.name} with its batch"
            " axis fixed at {fixed} (export with a dynamic batch)",
        )
        # A backend that takes frames (torch with inference.settings.input=frames) prepares
        # them and guards against NaN/Inf on its device.
        self.device: Any = None
        if info.input_form == FRAMES:
            from visionrt.tasks.device_depth import DeviceDepth  # torch: imported when used

            self.device = DeviceDepth(self.backend, self.input_hw)
        self._runtime = self.backend.name if self.backend.name in {r.name for r in ROWS} else ""
        self._fp32: Backend | None = None
        self._lock = threading.Lock()
        self.nonfinite = 0
        self.recomputed = 0
        self._events: dict[str, int] = {}
        # Its own lock: `_lock` is held while the FP32 backend loads (seconds), and the other
        # workers' decode must not wait for that.
        self._events_lock = threading.Lock()

    def _check_is_depth(
        self, out_shape: Sequence[int], input_hw: tuple[int, int] | None, names: Sequence[str]
    ) -> None:
        """ModelLoadError when the model's output is not a depth map (a detector given to
        --depth), naming the classes it has when it has some."""
        reason = not_depth_reason(out_shape, input_hw)
        if not reason:
            return
        if names:
            shown = ", ".join(names[:4]) + (", …" if len(names) > 4 else "")
            reason += f" (a detector? it names {len(names)} classes: {shown})"
        raise ModelLoadError(
            f"depth model {self.model.name}: not a depth model: {reason}; expected a Depth"
            " Anything v2 export (output [N, H, W])"
        )

    def _check_patches(self, input_hw: tuple[int, int]) -> None:
        patches = (input_hw[0] // PATCH) * (input_hw[1] // PATCH)
        if patches > MAX_PATCHES:
            raise ConfigError(
                f"depth input {input_hw[0]}x{input_hw[1]}: {patches} patches of {PATCH} px,"
                f" more than the {MAX_PATCHES} that keep the ViT's attention to a few GB;"
                f" {DEPTH_SIZE_FIX}"
            )

    def new_buffer(self) -> Any:
        """One batch row of input: (1, 3, H, W) float32, or a FrameSlot when the frames go to
        the device whole."""
        if self.device is not None:
            return self.device.new_slot()
        return np.empty((1, 3, *self.input_hw), np.float32)

    @property
    def takes_i420(self) -> bool:
        """`prepare` takes I420 pixels too (`Frame.pixels`): the device converts them."""
        return self.device is not None

    @property
    def pinning(self) -> Pinning | None:
        """How a worker's ring is made the device's to copy frames from (None: not needed)."""
        return self.device.pinning if self.device is not None else None

    def prepare(self, image: npt.NDArray[np.uint8], buffer: Any, last: Any = None) -> DepthGeometry:
        """Resize and normalize `image` into `buffer` (or hold it in its slot, for the device
        to do that); every pixel is written (no padding), so `last` is not needed."""
        if self.device is not None:
            buffer.hold(image, None)
            return DepthGeometry(picture_hw(image), self.input_hw)
        return depth_into(image, buffer[0], self.input_hw)

    def _run(self, backend: Backend, tensor: npt.NDArray[np.float32]) -> npt.NDArray[Any]:
        rows = tensor.shape[0]
        if self._batches.pad and rows < self.batch:  # the FP32 recompute's rows: pad them
            tensor = self._batches.fill([tensor])
        output = np.asarray(backend.infer({self.input_name: tensor})[0])
        return output[:rows]

    def infer(self, rows: list[Any]) -> npt.NDArray[np.object_]:
        """Run prepared rows as one batch; one DepthRow per input row (an object array, so
        that each row carries its own `recomputed` flag to `decode`)."""
        try:
            return self._infer(rows)
        finally:
            if self.device is not None:  # the frames went up (and were recomputed): let go
                for slot in rows:
                    slot.let_go()

    def _infer(self, rows: list[Any]) -> npt.NDArray[np.object_]:
        if self.device is not None:
            output, bad = self.device.infer(rows)
            tensor = None
        else:
            tensor = self._batches.fill(rows)
            output = self._run(self.backend, tensor)[: len(rows)]
            bad = nonfinite_rows(output)
        result = np.empty(len(rows), dtype=object)
        for i in range(len(rows)):
            result[i] = DepthRow(output[i])
        if bad.any():
            if tensor is None:  # the bad frames prepared on the host for the FP32 backend
                tensor = np.stack([self._host_input(rows[i]) for i in np.flatnonzero(bad)])
            else:
                tensor = tensor[bad]
            for row, values in zip(np.flatnonzero(bad), self._recover(tensor), strict=True):
                result[row] = DepthRow(values, recomputed=True)
        return result

    def _host_input(self, slot: Any) -> npt.NDArray[np.float32]:
        """A slot's frame prepared on the host, (3, H, W) float32."""
        row = np.empty((3, *self.input_hw), np.float32)
        depth_into(slot.bgr(), row, self.input_hw)
        return row

    def _recover(self, tensor: npt.NDArray[np.float32]) -> npt.NDArray[Any]:
        """FP32 outputs for the rows of `tensor`, whose outputs had NaN/Inf; or raise."""
        count = tensor.shape[0]
        with self._lock:
            self.nonfinite += count
        info = self.backend.info
        where = f"{self.model.name} on {info.runtime} ({info.precision})"
        if self.on_nonfinite == "fail":
            raise NonFiniteDepthError(
                f"depth: {count} frame(s) with NaN/Inf from {where}; depth.on_nonfinite=fail"
                " refuses them (recompute runs them again in FP32)"
            )
        if info.precision == "fp32":
            raise NonFiniteDepthError(
                f"depth: {count} frame(s) with NaN/Inf from {where}, which runs FP32 already:"
                " the model or its input is at fault, not reduced precision"
            )
        output = self._run(self._fp32_backend(), tensor)
        if nonfinite_rows(output).any():
            raise NonFiniteDepthError(
                f"depth: NaN/Inf from {where}, and from FP32 too: the model or its input is at"
                " fault"
            )
        with self._lock:
            self.recomputed += count
        return output

    def _fp32_backend(self) -> Backend:
        """The same model file in the same runtime at FP32, loaded at the first use (a backend
        passed in from outside, not in the registry, falls back to the file's own reader)."""
        with self._lock:
            if self._fp32 is None:
                name = self._runtime or row_for_file(self.model, self.options.device).name
                options = replace(self.options, precision="fp32")
                if self.device is not None:  # the recompute's input is host arrays
                    settings = {**options.settings, "input": "arrays"}
                    options = replace(options, settings=settings)
                try:
                    self._fp32 = load_backend(name, self._load_path, options)
                except VisionRTError as err:
                    raise ModelLoadError(
                        f"depth: cannot load the FP32 backend ({name}) to recompute NaN/Inf"
                        f" frames: {err}"
                    ) from err
            return self._fp32

    def decode(self, output: DepthRow | npt.NDArray[Any], geometry: DepthGeometry) -> DepthMap:
        """One row of `infer` (or a raw (H, W) array) → a DepthMap at the source's size."""
        if isinstance(output, DepthRow):
            if output.recomputed:
                # Counted here, not in `infer`: a batch may mix sources, and the pipeline
                # drains right after this decode, so the event lands on this frame's source.
                with self._events_lock:
                    self._events[RECOMPUTED_EVENT] = self._events.get(RECOMPUTED_EVENT, 0) + 1
            if not isinstance(output.values, np.ndarray):  # a map left on the device
                assert self.device is not None
                return self.device.to_source(
                    output.values, geometry.source_hw, self.metric, output.recomputed
                )
            return depth_to_source(
                output.values, geometry.source_hw, self.metric, output.recomputed
            )
        return depth_to_source(output, geometry.source_hw, self.metric)

    def drain_events(self) -> dict[str, int]:
        """Events counted since the last call ({RECOMPUTED_EVENT: frames}), then forgotten; {}
        when none. Safe to call from any thread."""
        with self._events_lock:
            events, self._events = self._events, {}
        return events

    def warm_up(self, calls: int) -> None:
        """`calls` inferences of a full batch of blank frames; out of memory is one ConfigError
        naming the size."""
        height, width = self.input_hw
        what = f"depth warm-up at {height}x{width} (batch {self.batch})"
        with out_of_memory_as(what, DEPTH_SIZE_FIX):
            if self.device is not None:
                self.device.warm_up(self.batch, calls)
                return
            blank = np.zeros((self.batch, 3, height, width), np.float32)
            for _ in range(calls):
                self.backend.infer({self.input_name: blank})

    def describe(self) -> dict[str, Any]:
        """What ran, for the run summary; `architecture_only` when the model has random
        weights (Depth Anything built by scripts/build_depth_model.py)."""
        info = self.backend.info
        facts: dict[str, Any] = {
            "model": str(self.model),
            "runtime": info.runtime,
            "version": info.version,
            "device": info.device,
            "precision": info.precision,
            "input_hw": list(self.input_hw),
            "batch": self.batch,
            "concurrency": self.backend.concurrency,
            "units": DepthMap(np.zeros((1, 1), np.float32), self.metric).units,
            "on_nonfinite": self.on_nonfinite,
            "nonfinite": self.nonfinite,
            "recomputed": self.recomputed,
            **{k: v for k, v in info.details.items() if k != "model"},
        }
        if self.architecture_only:
            facts["architecture_only"] = True
            facts["weights"] = "architecture-only (random weights)"
        return facts

    def close(self) -> None:
        if self._fp32 is not None:
            self._fp32.close()
            self._fp32 = None
        if self.owns_backend:
            self.backend.close()
