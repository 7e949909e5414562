"""TorchRec's planner under a time bound, for ``compare``: on a workload of hundreds of tables it
can search for longer than anyone waits (h100-16: over 600 s on 2 cores, where shardopt takes 13).

Its own ``timeout_seconds`` stops its proposals after ``timeout_s`` and keeps the best plan found;
but enumerating and scoring come before and after that loop, so the call runs in a child process
that is stopped outright at ``hard_limit(timeout_s)``. The parent reports progress while it waits.
"""

from __future__ import annotations

import multiprocessing
import queue as queues
import time
from dataclasses import dataclass
from typing import Callable, Optional

from shardopt.core.errors import ErrorKind, ShardoptError
from shardopt.core.plan import Plan
from shardopt.core.workload import Workload

TICK_S = 15.0  # how often the wait says how long it has waited


NOT_FINISHED = "did not finish"  # in every note of a search stopped by its bound (compare reads it)


def hard_limit(timeout_s: int) -> float:
    """When the child is stopped: TorchRec's search bound plus room to enumerate and score."""
    return 2.0 * timeout_s + 30.0


@dataclass(frozen=True)
class Bounded:
    """TorchRec's plan, or None where it did not finish; its wall time; what to tell the user."""

    plan: Optional[Plan]
    seconds: float
    note: str = ""


class _TimedOut:
    """Catches TorchRec's "Exceeded time limit" log line: its search stopped at timeout_seconds."""

    def __init__(self) -> None:
        import logging

        self.hit = False
        handler = logging.Handler(logging.INFO)
        handler.emit = lambda record: setattr(self, "hit", self.hit or "Exceeded time limit" in record.getMessage())
        log = logging.getLogger("torchrec.distributed.planner.planners")
        log.setLevel(logging.INFO)
        log.propagate = False
        log.handlers = [handler]


def _child(data: dict, sha256: Optional[str], timeout_s: int, out) -> None:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger().setLevel(logging.ERROR)
    timed_out = _TimedOut()
    from shardopt.core.plan import plan_to_json
    from shardopt.core.workload import workload_from_dict
    from shardopt.torchrec.to_model import torchrec_plan

    try:
        plan = torchrec_plan(workload_from_dict(data), sha256, timeout_s=timeout_s)
        out.put(("timed-out" if timed_out.hit else "plan", plan_to_json(plan)))
    except ShardoptError as exc:  # its kind travels: unusable input is not a failure to plan
        out.put(("error" if exc.kind == ErrorKind.INFEASIBLE else "input", str(exc)))
    except Exception as exc:  # noqa: BLE001 - said in one line by the parent
        out.put(("error", f"TorchRec's planner raised {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))


def bounded_torchrec_plan(workload: Workload, sha256: Optional[str], timeout_s: int,
                          progress: Callable[[str], None] = lambda _: None) -> Bounded:
    """TorchRec's plan of ``workload`` within the bounds above; its failure to plan is a ShardoptError,
    as ``torchrec_plan``'s is."""
    from shardopt.core.plan import plan_from_dict
    from shardopt.core.workload import workload_to_dict

    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no threads inherited
    out = context.Queue()
    child = context.Process(target=_child, args=(workload_to_dict(workload), sha256, timeout_s, out), daemon=True)
    started = time.perf_counter()
    child.start()
    deadline, next_tick = started + hard_limit(timeout_s), started + TICK_S
    try:
        while True:
            now = time.perf_counter()
            try:
                kind, text = out.get(timeout=max(0.1, min(next_tick, deadline) - now))
                break
            except queues.Empty:
                now = time.perf_counter()
                if now >= deadline:
                    return Bounded(None, now - started, f"TorchRec's planner {NOT_FINISHED} in {now - started:.0f} s"
                                   f" (its search was given {timeout_s} s; --torchrec-timeout)")
                if now >= next_tick:
                    progress(f"TorchRec's planner: {now - started:.0f} s so far (search bound {timeout_s} s)")
                    next_tick += TICK_S
                if not child.is_alive():
                    try:
                        kind, text = out.get(timeout=2.0)
                        break
                    except queues.Empty:
                        raise ShardoptError(f"TorchRec's planner stopped without a plan (exit code"
                                            f" {child.exitcode})", kind=ErrorKind.INFEASIBLE) from None
    finally:
        if child.is_alive():
            child.kill()
        child.join(5)
    seconds = time.perf_counter() - started
    if kind in ("error", "input"):
        raise ShardoptError(text, kind=ErrorKind.INFEASIBLE if kind == "error" else ErrorKind.INPUT)
    import json

    note = (f"TorchRec's planner {NOT_FINISHED} its search in {timeout_s} s (--torchrec-timeout): its best"
            " plan by then" if kind == "timed-out" else "")
    return Bounded(plan_from_dict(json.loads(text), "TorchRec's plan"), seconds, note)
