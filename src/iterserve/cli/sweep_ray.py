"""Sweep trials on a Ray cluster: ``iterserve sweep --ray ADDRESS``.

Ray is an optional extra (``pip install 'iterserve[ray]'``) imported here,
only when the flag is given. Each trial is the same top-level function the
local process pool runs, on the same pickled :class:`TrialJob`, so a trial's
result depends on its job alone and the sweep is identical either way; the
caller orders the results, not the cluster.

``ADDRESS`` is a running cluster's GCS address (``HOST:PORT``, as printed by
``ray start --head``) or ``auto``. The cluster's workers must be able to
import ``iterserve`` (the same environment, or a Ray runtime environment).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # sweep imports this module lazily; no import cycle at run time
    from iterserve.cli.sweep import TrialJob, TrialResult


class RayUnavailable(RuntimeError):
    """Ray is not installed, or the cluster at the address cannot be reached."""


def ray_trials(jobs: Sequence[TrialJob], address: str) -> Generator[TrialResult, None, None]:
    """Submit every job to the cluster at ``address`` now, then yield the
    results as they complete; disconnects when the iterator is exhausted or
    closed."""
    ray = _import_ray()
    _connect(ray, address)
    return _results(ray, jobs)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable("--ray needs Ray: pip install 'iterserve[ray]'") from None
    return ray


def _connect(ray: Any, address: str) -> None:
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except Exception as error:  # Ray raises several types for an unreachable cluster
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise RayUnavailable(f"--ray {address}: cannot connect: "
                             f"{type(error).__name__}: {first_line}") from None


def _results(ray: Any, jobs: Sequence[TrialJob]) -> Generator[TrialResult, None, None]:
    from iterserve.cli.sweep import run_trial

    try:
        remote = ray.remote(run_trial)
        pending = [remote.remote(job) for job in jobs]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    finally:
        ray.shutdown()
