"""The bench/tune HTML report: the Pareto front by hand, and a report that holds its pictures."""

from __future__ import annotations

from pathlib import Path

from visionrt.bench.report import ReportPoint, pareto_front, write_report

POINTS = [
    ReportPoint("fast", 60, 120, 0.97, {"infer": 30, "decode": 2}),
    ReportPoint("low-latency", 30, 40, 0.99, {"infer": 25, "decode": 2}),
    ReportPoint("dominated", 25, 130, 0.99, {"infer": 70}),  # slower and later than "fast"
    ReportPoint("reference", 6, 300, 1.0, {"infer": 160, "decode": 2, "depth": 5}),
]


def test_pareto_front_by_hand() -> None:
    assert [p.label for p in pareto_front(POINTS)] == ["fast", "low-latency"]


def test_report_is_self_contained(tmp_path: Path) -> None:
    written = write_report(POINTS, tmp_path / "report.html", "test")
    page = written[0].read_text()
    assert page.count("data:image/png;base64,") == 2
    assert "<td>dominated</td>" in page
    for png in written[1:]:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
