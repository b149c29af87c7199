"""Past one machine: sources spread over workers (Ray actors, or threads here), each running a
Pipeline; one coordinator commits every source's frames in order, once, across retries.

    from visionrt.config import load_config
    from visionrt.distributed import run_on_ray

    summary, report = run_on_ray(load_config("run.yaml"))  # its `cluster:` section says where

runs `run.yaml` as given (no plan); `visionrt.runs.run_configured("run.yaml")` runs it as
`visionrt run --config run.yaml` does, each kind of machine on its own plan.

`RunStop` ends such a run early from another thread (its outputs finalized).
"""

from visionrt.distributed.coordinator import RunStop
from visionrt.distributed.ray_run import run_on_ray

__all__ = ["RunStop", "run_on_ray"]
