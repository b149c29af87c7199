"""Tune: search this machine's configurations (backend × precision × size × requests) on the
user's own video under an accuracy budget, and keep the best as a plan `run` uses by default,
with the motion gating that pays there."""

from visionrt.plans import Plan, cached_plan, fingerprint_differences, machine_fingerprint
from visionrt.preprocess.letterbox import aligned_sizes
from visionrt.tune.candidates import Candidate, Machine, candidates
from visionrt.tune.motion import MotionOutcome, tune_motion
from visionrt.tune.search import Limits, Measurement, successive_halving
from visionrt.tune.tuner import TuneOutcome, tune

__all__ = [
    "Candidate",
    "Limits",
    "Machine",
    "Measurement",
    "MotionOutcome",
    "Plan",
    "TuneOutcome",
    "aligned_sizes",
    "cached_plan",
    "candidates",
    "fingerprint_differences",
    "machine_fingerprint",
    "successive_halving",
    "tune",
    "tune_motion",
]
