"""`visionrt tune --ray`: a plan for each kind of machine in the cluster. Each node reports its
machine's fingerprint; for each kind without a plan in the driver's plan folder, one of its nodes
runs `visionrt tune` on the driver's model and video (shipped when it lacks them), with the
whole node to itself; the plan and its artifact come back into the driver's plan folder, from
where `run --ray` ships them to every node of that kind."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from visionrt.distributed.files import Manifest, localized
from visionrt.errors import ConfigError
from visionrt.paths import file_sha256
from visionrt.plans import Plan, cached_plan, fingerprint_key, machine_fingerprint, plan_path

# What a node sends back: the plan file's text and its artifact folder's files (name → bytes).
Tuned = tuple[str, dict[str, bytes]]


@dataclass
class MachineKind:
    """Nodes whose machines share a fingerprint."""

    fingerprint: dict[str, Any]
    nodes: list[str] = field(default_factory=list)
    cpus: float = 0.0  # of the first node, the one that tunes
    plan: str = ""  # the cached plan's file, or what tuning left


def machine_kinds(ray: Any) -> dict[str, MachineKind]:
    """The cluster's alive nodes grouped by their machine's fingerprint (a task on each)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    probe = ray.remote(machine_fingerprint)
    asked = [
        probe.options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote()
        for n in nodes
    ]
    kinds: dict[str, MachineKind] = {}
    for node, fingerprint in zip(nodes, ray.get(asked), strict=True):
        kind = kinds.setdefault(fingerprint_key(fingerprint), MachineKind(fingerprint))
        kind.nodes.append(node["NodeID"])
        kind.cpus = kind.cpus or float(node.get("Resources", {}).get("CPU", 1.0))
    return kinds


def _manifest(paths: Sequence[Path]) -> Manifest:
    return {str(p): (file_sha256(p), file_sha256(p)) for p in paths}


def tune_here(
    model: str, video: str, files: Manifest, fetch_from: str, args: Sequence[str]
) -> Tuned:
    """On a node: `visionrt tune` of `model` on `video` (fetched from the driver's node when this
    one lacks them) into a plan folder of its own; the plan's text and artifact files."""
    from visionrt.distributed.actor import fetch

    named = {"model": model, "video": video}
    keys = (("", "model"), ("", "video"))
    here = localized(named, files, lambda: fetch(fetch_from, files), keys=keys)
    with tempfile.TemporaryDirectory(prefix="visionrt-tune-") as root:
        env = {**os.environ, "VISIONRT_PLANS": root}
        command = [sys.executable, "-m", "visionrt.cli.main", "tune", str(here["video"])]
        command += ["--model", str(here["model"]), *args]
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode:
            lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
            raise RuntimeError(f"visionrt tune exited {done.returncode}: {lines[-1]}")
        plans = sorted(Path(root).glob("*.yaml"))
        if not plans:
            raise RuntimeError("visionrt tune cached no plan")
        plan = Plan.load(plans[0])
        artifact = Path(str(plan.run["model"]))
        if artifact.resolve() == Path(str(here["model"])).resolve():
            return plans[0].read_text(encoding="utf-8"), {}  # the model itself runs
        # An artifact visionrt built: its folder holds it alone (an IR with its weights).
        files_out = {p.name: p.read_bytes() for p in artifact.parent.iterdir() if p.is_file()}
        return plans[0].read_text(encoding="utf-8"), files_out


def keep(model: Path, fingerprint: Mapping[str, Any], tuned: Tuned, root: Path | None) -> Path:
    """The plan a node tuned, into this machine's plan folder for that machine's fingerprint;
    its artifact beside this machine's own artifacts (the plan names it there), or this
    machine's `model` when the plan runs the model itself."""
    text, files = tuned
    path = plan_path(model, dict(fingerprint), root)
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.partial")
    draft.write_text(text, encoding="utf-8")
    plan = Plan.load(draft)
    draft.unlink()
    artifact = Path(str(plan.run["model"]))
    if not files:
        plan.run["model"] = str(model)
    else:
        key = fingerprint_key(dict(fingerprint))
        # Beside the plan folder: ~/.cache/visionrt/artifacts for the default one.
        folder = path.parent.parent / "artifacts" / f"{key}-{artifact.parent.name}"
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
        plan.run["model"] = str(folder / artifact.name)
    plan.save(path)
    return path


def tune_kinds(
    model: Path,
    video: Path,
    args: Sequence[str],
    say: Callable[[str], None],
    root: Path | None = None,
) -> dict[str, MachineKind]:
    """A plan for each kind of machine in the connected cluster that has none in `root` (the
    driver's plan folder), tuned on one of its nodes, all kinds at once. `args`: the tune
    options for each node (`--min-fidelity 0.95 …`)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not model.is_file() or not video.is_file():
        raise ConfigError(f"tune --ray: the model and the video must be files: {model}, {video}")
    kinds = machine_kinds(ray)
    files = _manifest([model, video])
    driver = ray.get_runtime_context().get_node_id()
    remote_tune = ray.remote(tune_here)
    waiting: dict[str, Any] = {}
    for key, kind in kinds.items():
        found = cached_plan(model, root, kind.fingerprint)
        head = f"{key} ({len(kind.nodes)} node(s), {kind.fingerprint['cpu']}):"
        if found is not None:
            kind.plan = str(found[1])
            say(f"{head} plan {found[1].name}")
            continue
        say(f"{head} tuning on one of its nodes…")
        # The whole node: another run on it would make its figures wrong.
        waiting[key] = remote_tune.options(
            num_cpus=kind.cpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(kind.nodes[0], soft=False),
            max_retries=0,
        ).remote(str(model), str(video), files, driver, list(args))

    def collect(key: str) -> None:
        kind = kinds[key]
        try:
            kind.plan = str(keep(model, kind.fingerprint, ray.get(waiting[key]), root))
            say(f"{key}: plan {Path(kind.plan).name}")
        except Exception as err:  # one kind's failure leaves the others' plans
            kind.plan = f"failed: {err}"
            say(f"{key}: {kind.plan}")

    with ThreadPoolExecutor(max_workers=max(1, len(waiting))) as pool:
        list(pool.map(collect, waiting))
    return kinds
