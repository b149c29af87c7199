"""A run's configuration under its plan: the one place that decides which plan a run takes and
what it changes — the detector (proven on each source size: `accuracy.geometry.settle`), the
detectors of other sizes, the motion gating `tune` kept, the region model, the depth model's
plan, the live audit's reference and budget, and several sources batched on a GPU — each with
a line saying which, or why none.
`run`, `serve`, a cluster's nodes and the Python API (`Pipeline(plan=None)`, through
`api_request`) come through `plan_run`; the CLI only prints what it says."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from visionrt.accuracy.check import Say
from visionrt.accuracy.geometry import settle
from visionrt.backends import BackendOptions
from visionrt.config import DepthConfig, RunConfig, config_over, given_options, load_config
from visionrt.config.pipeline import DepthOptions, PipelineOptions
from visionrt.config.sizes import Size, SizedDetector, size_key
from visionrt.errors import ConfigError, SourceError
from visionrt.models import demo_model_path
from visionrt.paths import DEMO_VIDEO
from visionrt.pipeline.audit import planned_audit, planned_depth_audit
from visionrt.pipeline.planned import planned_regions
from visionrt.plans import PlanRequest, PlanUse, use_depth_plan, use_gating, use_plan
from visionrt.plans.gpu import batch_across_sources
from visionrt.plans.resolve import CHOICES, layered
from visionrt.plans.store import PIPELINE_KEY
from visionrt.sources.naming import split_name
from visionrt.sources.registry import LIVE_KINDS, source_kind


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """The run as it runs (`config`: the plan's sections under the user's own settings), the
    lines saying which plans it takes and why (or why none), and the detector's decision
    (`use`: an audit's verdict on a source's size goes back into its plan)."""

    config: RunConfig
    notes: tuple[str, ...]
    use: PlanUse


def plan_run(
    own: RunConfig,
    given: Mapping[str, Any],
    plan: str | Path | None = None,
    live: bool | None = None,
    say: Say | None = None,
    fingerprint: dict[str, Any] | None = None,
    proven_on: Sequence[str] | None = None,
) -> PlannedRun:
    """`own` (the user's configuration, defaults filled in) under its plan. `given` is what the
    user set, as a nested dict (`config.given_options`: an explicit default is a choice too):
    the plan (`plan`, a plan file; None: the one cached for the model on this machine, or on
    the machine `fingerprint` describes) serves the run only when the user chose no backend or
    configuration-picking setting (`plans.use_plan`), and the user's settings stay over it.
    `live` (None: told from the sources' strings) picks the plan's live settings; `say` gets a
    proof's progress on a new frame size (seconds of checks), made on the sources `proven_on`
    (None: `own`'s, or the demo video a run given none reads)."""
    request = PlanRequest(
        model=Path(own.model) if own.model else None,
        chosen=_chosen(given),
        device=str((given.get("inference") or {}).get("device") or ""),
        batch=own.inference.batch,
        tile=bool(own.pipeline.tiling.tile),
        live=_live(own) if live is None else live,
    )
    use = use_plan(request, plan, fingerprint=fingerprint)
    if use.sections is not None:
        specs = proven_on if proven_on is not None else own.sources or (str(DEMO_VIDEO),)
        use = settle(use, [spec for spec in specs if spec], own.postprocess.conf, say)
    cfg, notes = own, [use.note]
    if use.runs:
        cfg, gating_note = _with_gating(use, own, given)
        if use.sections is not None:
            cfg = replace(cfg, model=str(use.sections["model"]))
        cfg = _with_sizes(cfg, use, own, given)
        asked = own.model or None  # the model the user named: the plan's FP32 reference
        options, regions_note = planned_regions(cfg.pipeline, use.plan, cfg.model, asked)
        cfg = replace(cfg, pipeline=planned_audit(options, use.plan))
        notes += [gating_note, regions_note]
    cfg, depth_note = _with_depth_plan(cfg, given.get("depth") or {}, fingerprint)
    cfg, batch_note = _batched(cfg, given, len(own.sources))
    notes += [depth_note, batch_note]
    return PlannedRun(cfg, tuple(note for note in notes if note), use)


def _batched(cfg: RunConfig, given: Mapping[str, Any], sources: int) -> tuple[RunConfig, str]:
    """Several sources on a CUDA device go to the detector together
    (`plans.gpu.batch_across_sources`), unless the user gave a batch (`--batch 1` too) or
    tiles (a batch of their own)."""
    if "batch" in (given.get("inference") or {}) or cfg.pipeline.tiling.tile:
        return cfg, ""
    options, line = batch_across_sources(cfg.inference, sources)
    return replace(cfg, inference=options), line


def planned_config(
    config: str | Path | None = None,
    overrides: Sequence[str] = (),
    values: Mapping[str, Any] | None = None,
    plan: str | Path | None = None,
    no_plan: bool = False,
    say: Say | None = None,
    fingerprint: dict[str, Any] | None = None,
) -> PlannedRun:
    """What `visionrt run` runs: the user's configuration (defaults < the YAML file `config` <
    `overrides`, KEY=VALUE < `values`, a nested dict as the flags give it) under its plan
    (`plan_run`: `plan`, a plan file; None: the one cached for the model on this machine, or on
    the cluster node `fingerprint` describes; `no_plan`: none), and the demo's model and video
    where it names none. `say` gets a proof's progress on a new frame size."""
    if plan is not None and no_plan:
        raise ConfigError("--plan and --no-plan: expected one of them")
    own = load_config(config, list(overrides), dict(values or {}))
    if no_plan:
        return PlannedRun(with_defaults(own), (), PlanUse(None, ""))
    given = given_options(config, list(overrides), dict(values or {}))
    planned = plan_run(own, given, plan, say=say, fingerprint=fingerprint)
    return replace(planned, config=with_defaults(planned.config))


def with_defaults(config: RunConfig) -> RunConfig:
    """`config` with the demo model and video where it names none."""
    if not config.model:
        config = replace(config, model=str(demo_model_path()))
    if not config.sources:
        if not DEMO_VIDEO.is_file():
            raise SourceError(
                f"no source given and the demo video {DEMO_VIDEO} is missing:"
                " apt-get install opencv-doc (or `make setup`)"
            )
        config = replace(config, sources=(str(DEMO_VIDEO),))
    return config


def api_request(
    specs: Sequence[str],
    model: str | Path,
    backend: str,
    backend_options: BackendOptions | None,
    options: PipelineOptions | None,
    depth: DepthOptions | None,
    sizes: Mapping[Size, SizedDetector] | None,
) -> tuple[RunConfig, dict[str, Any]]:
    """The Python API's arguments as a configuration and what the caller set (`plan_run`'s
    `own` and `given`): a backend, options that differ from the defaults, any pipeline options
    (the plan's motion gating then stays off), the depth model's backend and options."""
    inference = backend_options or BackendOptions()
    depth = depth or DepthOptions()
    own = RunConfig(
        sources=tuple(specs),
        model=str(model),
        backend=backend,
        inference=inference,
        pipeline=options or PipelineOptions(),
        depth=DepthConfig(**{f.name: getattr(depth, f.name) for f in fields(DepthOptions)}),
        sizes={size_key(size): chosen for size, chosen in (sizes or {}).items()},
    )
    given: dict[str, Any] = {}
    if backend:
        given["backend"] = backend
    if changed := _changed(inference, BackendOptions()):
        given["inference"] = changed
    if options is not None:
        given[PIPELINE_KEY] = asdict(options)
    depth_given: dict[str, Any] = {"backend": depth.backend} if depth.backend else {}
    if changed := _changed(depth.inference, BackendOptions()):
        depth_given["inference"] = changed
    if depth_given:
        given["depth"] = depth_given
    return own, given


def _changed(options: BackendOptions, defaults: BackendOptions) -> dict[str, Any]:
    """The options that differ from the defaults, as settings (a path as its text)."""
    changed = {}
    for f in fields(options):
        value = getattr(options, f.name)
        if value != getattr(defaults, f.name):
            changed[f.name] = str(value) if isinstance(value, Path) else value
    return changed


def _with_gating(use: PlanUse, own: RunConfig, given: Mapping[str, Any]) -> tuple[RunConfig, str]:
    """The user's settings over the plan's sections, and over the plan's motion gating unless
    the user chose the mode (`plans.use_gating`); a gating section that does not compose with
    the user's options is set aside with the reason, never an error."""
    sections = use.sections or {}  # {}: the sources of some sizes only run the plan's
    gating = use_gating(use.plan, given.get(PIPELINE_KEY) or {})
    if not gating.section:
        return _over(own, sections, given), gating.note
    try:
        return _over(own, {**sections, PIPELINE_KEY: gating.section}, given), gating.note
    except ConfigError as err:
        return _over(own, sections, given), f"plan's motion gating set aside: {err}"


def _over(own: RunConfig, sections: Mapping[str, Any], given: Mapping[str, Any]) -> RunConfig:
    """`own` with each section a plan sets (model, backend, inference, pipeline) as the user's
    settings layered over the plan's."""
    mine = config_over(sections, {key: value for key, value in given.items() if key in sections})
    return replace(own, **{key: getattr(mine, key) for key in sections})


def _with_sizes(
    cfg: RunConfig, use: PlanUse, own: RunConfig, given: Mapping[str, Any]
) -> RunConfig:
    """The detectors the sources of some frame sizes run instead of the run's own (what the plan
    proved there: `PlanUse.by_size`), each under the user's settings as the run's own is; the
    reference runs the model the user named, with the user's settings alone."""
    if not use.by_size or cfg.sizes:  # a `sizes` section of the user's own wins
        return cfg
    sizes = dict(cfg.sizes)
    for size, sections in use.by_size.items():
        if sections is None:
            mine = with_defaults(own)
        else:
            mine = replace(_over(own, sections, given), model=str(sections["model"]))
        sizes[size_key(size)] = SizedDetector(mine.model, mine.backend, mine.inference)
    return replace(cfg, sizes=sizes)


def _with_depth_plan(
    cfg: RunConfig, given: Mapping[str, Any], fingerprint: dict[str, Any] | None = None
) -> tuple[RunConfig, str]:
    """The depth model's plan (`tune --depth`) in place of FP32, unless the user chose its
    backend or inference settings other than a device of the plan's kind
    (`plans.use_depth_plan`); its `every` unless the user gave `depth.every`."""
    if not cfg.depth.model:
        return cfg, ""
    device = (given.get("inference") or {}).get("device")
    use = use_depth_plan(
        Path(cfg.depth.model),
        _chosen(given),
        cfg.depth.short_side,
        fingerprint=fingerprint,
        device=str(device or ""),
    )
    if use.sections is None:
        return cfg, use.note
    inference = layered(cfg.depth.inference, use.sections.get("inference") or {})
    if device:  # the user's device (`cuda:1`) runs a plan of its kind
        inference = replace(inference, device=cfg.depth.inference.device)
    depth = replace(
        cfg.depth,
        model=str(use.sections["model"]),
        backend=str(use.sections["backend"]),
        inference=inference,
        short_side=int(use.sections["short_side"]),
        every=cfg.depth.every if "every" in given else int(use.sections.get("every", 1)),
    )
    return replace(cfg, depth=planned_depth_audit(depth, use.plan)), use.note


def _chosen(section: Mapping[str, Any]) -> tuple[str, ...]:
    """The configuration-picking keys a section of the user's own settings gives (explicit
    values count: `--precision fp32` is a choice although fp32 is the default)."""
    chosen = ("backend",) if "backend" in section else ()
    return chosen + tuple(key for key in CHOICES if key in (section.get("inference") or {}))


def _live(config: RunConfig) -> bool:
    """Whether the run will be live (mode, --realtime, or a camera/stream among the sources),
    told from the strings alone: the plan is chosen before any source opens."""
    if config.source.mode != "auto":
        return config.source.mode == "live"
    kinds = [source_kind(split_name(spec)[1]) for spec in config.sources]
    return config.source.realtime or any(kind in LIVE_KINDS for kind in kinds)
