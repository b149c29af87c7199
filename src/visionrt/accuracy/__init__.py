"""Accuracy in production: a plan proven on each source geometry it runs on (geometry), and
the live audit against the FP32 reference (audit)."""

from visionrt.accuracy.audit import Auditor
from visionrt.accuracy.audit_window import AuditEvent, AuditSettings, sample_period

__all__ = [
    "AuditEvent",
    "AuditSettings",
    "Auditor",
    "sample_period",
]
