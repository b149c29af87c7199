"""What a run tells its caller as it goes, beside the results: each latency-ladder step, each
audit event and each note made while frames come (a zone outside its source's frames)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from visionrt.accuracy.audit_window import AuditEvent
from visionrt.pipeline.degrade import Change


@dataclass(slots=True)
class Hooks:
    """Callables the pipeline calls (None: not told; a note is then logged as a warning).
    `on_audit` is called on the audit's thread; the others on the thread the event happens on.
    Given when the Pipeline is built; a service that wraps a built one may set them before
    the run."""

    on_degrade: Callable[[Change], None] | None = None
    on_audit: Callable[[AuditEvent], None] | None = None
    on_note: Callable[[str], None] | None = None
