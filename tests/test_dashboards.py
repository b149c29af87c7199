"""The shipped Grafana dashboard and Prometheus alert rules: they parse, every panel queries
something, every rule is complete, and every visionrt_ metric their PromQL names is in the
metrics endpoint's output of real runs (zones and lines included)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import scraped

from visionrt import BackendOptions, Pipeline, SourceOptions
from visionrt.config import pipeline_options
from visionrt.telemetry import gpu, metrics
from visionrt.telemetry.stats import RunSummary

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "visionrt-dashboard.json"
RULES = ROOT / "deploy" / "prometheus" / "visionrt-alerts.yml"
# Exported only where nvidia-ml-py sees a GPU, so a CPU machine's scrape cannot hold them.
GPU_ONLY = "visionrt_gpu_"


def _names(promql: str) -> set[str]:
    """The visionrt_ metric names a PromQL expression reads, as written (no suffix stripped)."""
    return set(re.findall(r"\bvisionrt_[A-Za-z0-9_]*", promql))


def _sampled(text: str) -> set[str]:
    """The names with at least one sample in a Prometheus text exposition."""
    found = re.findall(r"^([A-Za-z_:][A-Za-z0-9_:]*)[{ ]", text, re.MULTILINE)
    return set(found)


def _missing(promql: str, sampled: set[str]) -> set[str]:
    return {name for name in _names(promql) if name not in sampled}


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, including those folded into collapsed rows."""
    found = []
    for panel in dashboard["panels"]:
        found.extend(panel.get("panels", []) if panel["type"] == "row" else [panel])
    return found


def _dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = [t["expr"] for panel in _panels(dashboard) for t in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def _rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def _scraped(pipeline: Pipeline) -> tuple[RunSummary, str]:
    return scraped(pipeline, {"runtime": pipeline.task.backend.info.runtime})


@pytest.fixture(scope="module")
def exposition(tiny_model: Path) -> str:
    """The endpoint's text after two short runs: a live one that drops frames, counts events
    and audits (a 80 ms null backend behind a 30 FPS synthetic camera, the audit on 1 frame in
    4), and one whose tracked box stands in a zone beside a line (the null backend detects
    nothing, so this one runs the tiny detector)."""
    pipeline = Pipeline(
        ["cam=synthetic:64x48:40"],
        tiny_model,
        "null",
        BackendOptions(settings={"delay_ms": "80"}),
        source_options=SourceOptions(mode="live"),
        options=pipeline_options(warmup=0, audit=0.25, audit_reference=str(tiny_model)),
    )
    assert pipeline.auditor is not None
    summary, text = _scraped(pipeline)
    assert summary.dropped, "the run must drop frames for visionrt_frames_dropped_total to show"
    # The tiny detector's box stands at (32, 29) (its feet) in a 64×48 frame.
    analytics = {"cam": {"zones": {"all": [[0, 0], [63, 0], [63, 47], [0, 47]]},
                         "lines": {"top": [[0, 5], [63, 5]]}}}  # fmt: skip
    zoned = Pipeline(
        ["cam=synthetic:64x48:5"],
        tiny_model,
        "onnxruntime",
        options=pipeline_options(warmup=0, track=True),
        analytics=analytics,
    )
    summary, zones_text = _scraped(zoned)
    assert summary.analytics["cam"]["zones"]["all"]["count"] == {"person": 1}
    return text + zones_text


def test_the_dashboard_parses_and_every_panel_has_a_query() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    panels = _panels(dashboard)
    assert panels
    for panel in panels:
        exprs = [target.get("expr", "").strip() for target in panel.get("targets", [])]
        assert exprs, f"panel {panel['title']!r} has no target"
        assert all(exprs), f"panel {panel['title']!r} has an empty expr"
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    assert len({panel["id"] for panel in panels}) == len(panels)


def test_every_rule_has_for_severity_and_summary() -> None:
    rules = _rules()
    assert {rule["alert"] for rule in rules} >= {
        "VisionrtSourceDown",
        "VisionrtDropsRising",
        "VisionrtLatencyOverSLO",
        "VisionrtFidelityUnderBudget",
    }
    for rule in rules:
        assert rule["expr"].strip(), rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]


@pytest.mark.parametrize(
    ("kind", "queries"),
    [("dashboard", _dashboard_queries()), ("rules", [r["expr"] for r in _rules()])],
)
def test_every_queried_metric_is_in_the_endpoint(
    kind: str, queries: list[str], exposition: str
) -> None:
    sampled = _sampled(exposition)
    # The GPU gauges are made in telemetry/gpu.py, which metrics.py serves.
    source = "".join(Path(m.__file__).read_text(encoding="utf-8") for m in (metrics, gpu))
    named = set().union(*(_names(query) for query in queries))
    assert named, f"no visionrt_ metric found in the {kind}"
    for name in sorted(named):
        if name.startswith(GPU_ONLY) and name not in sampled:
            # No GPU seen by this run: the name must at least be what the endpoint exports.
            assert f'"{name}"' in source, f"{kind}: {name} is not a metric the endpoint exports"
        else:
            assert name in sampled, f"{kind}: {name} is not in the endpoint's output"


@pytest.mark.parametrize(
    ("promql", "missing"),
    [
        ("rate(visionrt_frames_out_total[5m])", set()),
        ("rate(visionrt_frames_outt_total[5m])", {"visionrt_frames_outt_total"}),
        # A histogram is queried through its _bucket series; the bare name has no samples.
        (
            "histogram_quantile(0.95, rate(visionrt_latency_seconds[5m]))",
            {"visionrt_latency_seconds"},
        ),
        ("visionrt_frames_in / visionrt_queue_depth", {"visionrt_frames_in"}),
    ],
)
def test_a_metric_the_endpoint_lacks_is_reported(promql: str, missing: set[str]) -> None:
    sampled = _sampled(
        '# TYPE visionrt_frames_out counter\nvisionrt_frames_out_total{source="cam"} 3.0\n'
        'visionrt_latency_seconds_bucket{le="0.1",source="cam"} 3.0\n'
        'visionrt_queue_depth{queue="decoded"} 0.0\n'
    )
    assert _missing(promql, sampled) == missing
