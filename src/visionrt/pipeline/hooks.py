"""What a run tells its caller as it goes, beside the results: each latency-ladder step, each
audit event and each note made while frames come (a zone outside its source's frames)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from visionrt.accuracy.audit_window import AuditEvent
from visionrt.pipeline.degrade import Change

log = logging.getLogger("visionrt")


@dataclass(slots=True)
class Hooks:
    """Callables the pipeline calls (None: not told; a note is then logged as a warning).
    `on_audit` is called on the audit's thread; the others on the thread the event happens on.
    Given when the Pipeline is built; a service that wraps a built one may set them before
    the run."""

    on_degrade: Callable[[Change], None] | None = None
    on_audit: Callable[[AuditEvent], None] | None = None
    on_note: Callable[[str], None] | None = None

    def degraded(self, change: Change) -> None:
        if self.on_degrade is not None:
            self.on_degrade(change)

    def audited(self, event: AuditEvent) -> None:
        if self.on_audit is not None:  # read at the event: a service may set it late
            self.on_audit(event)
        else:  # no one to tell: the logger says it
            log.warning("%s", event)

    def noted(self, note: str) -> None:
        if self.on_note is not None:
            self.on_note(note)
        else:
            log.warning("%s", note)
