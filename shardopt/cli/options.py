"""Option types and option groups the commands share, so that one option reads alike everywhere."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import click

from shardopt.contracts import DEFAULT_CANDIDATES, DEFAULT_TIME_LIMIT_S, MAX_TIME_LIMIT_S, PlanConfig
from shardopt.core.errors import ShardoptError


class FiniteFloat(click.ParamType):
    """A float in [lo, hi] (or (lo, hi] when ``lo_open``); NaN and infinities are refused."""

    name = "float"

    def __init__(self, lo: float, hi: float, lo_open: bool = False) -> None:
        self.lo, self.hi, self.lo_open = lo, hi, lo_open

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"must be a number, got {value!r}", param, ctx)
        low_ok = number > self.lo if self.lo_open else number >= self.lo
        if not (math.isfinite(number) and low_ok and number <= self.hi):
            side = "(" if self.lo_open else "["
            self.fail(f"must be a finite number in {side}{self.lo:g}, {self.hi:g}], got {value}", param, ctx)
        return number


TIME_LIMIT = FiniteFloat(0, MAX_TIME_LIMIT_S, lo_open=True)
BUDGET = FiniteFloat(60, 7200)  # seconds of calibrate: under a minute, too few kernels to fit (30 s measured 30)
SEED = click.IntRange(0, 2**32 - 1)


def check_size_option(value: str | None, option: str) -> str | None:
    """A size option checked now, so its error names the option."""
    from shardopt.core.units import parse_size

    if value is not None:
        try:
            parse_size(value)
        except ValueError as exc:
            raise ShardoptError(f"{option}: {exc}") from None
    return value

def model_path(spec: str) -> Path | None:
    """The file a --cost-model value names, if it names one (an input, never to be overwritten)."""
    from shardopt.costmodel.registry import NAMES, model_file_part

    if spec in NAMES:
        return None
    named = model_file_part(spec)
    return Path(named[1] if named else spec)


COST_MODEL_HELP = ("analytic (calibrated where the package has a profile) | analytic-v0 | learned"
                   " | analytic@PATH or learned@PATH: that part of a model file (shardopt calibrate"
                   " writes one) | PATH (learned@PATH).")
SEARCH_HELP = ("ilp: CP-SAT over all candidates, warm-started by greedy; greedy: the warm start alone."
               " Both re-score ranks with the cost model and repair the bottleneck.")
TIME_LIMIT_HELP = ("Search effort, in seconds on a 2-core machine: it sizes the solver's deterministic"
                   " work limit and the repair's count of re-scores, so the same input gives the same"
                   " plan on a busy machine; the wall clock stops a search only past 3x this.")
CANDIDATES_HELP = ("torchrec: only cuts TorchRec runs as is; all: also row-wise over a subset of ranks"
                   " and FlexShard hot-row replicas, which need a runtime that supports them.")
COMM_PROFILE_HELP = ("Profile folder whose measured all-to-all times price communication. Default: the"
                     " workload's declared links, else its hardware profile's (all-to-all times the"
                     " model measured are used only on that very target: same hardware, one host, no"
                     " links declared).")
ROBUST_HELP = ("on: minimise the step the plan can be expected to take when the cost model is wrong (compute"
               " x1/3 to x3 against communication, each table's lookups off by twice the model's held-out"
               " error, more outside the shapes it was fitted on); off: the nominal step; auto: on where"
               " the model was not measured on the workload's target (another CPU, published GPU constants).")
OBJECTIVE_HELP = ("critical-path: the sum over a step's phases (lookups, all-to-all, backward all-to-all,"
                  " backward lookups) of the slowest rank in each, as a synchronous step takes; bottleneck:"
                  " the slowest rank's total.")


def cost_model_option(func):
    return click.option("--cost-model", "cost_model", default="analytic", show_default=True,
                        help=COST_MODEL_HELP)(func)


def plan_config_options(*, search: bool = True):
    """--cost-model, --time-limit and (with ``search``) --search, --candidates, --objective,
    gathered into one ``config`` argument: a :class:`~shardopt.contracts.PlanConfig`."""

    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, cost_model, time_limit, comm_profile=None, search_name="ilp",
                    candidate_set=DEFAULT_CANDIDATES, objective="critical-path", robust="auto", **kwargs):
            if robust == "on" and objective != "critical-path":
                raise ShardoptError("--robust on: the robust objective is the step's; drop --objective bottleneck")
            config = PlanConfig(search=search_name, time_limit_s=time_limit, candidates=candidate_set,
                                objective=objective, cost_model=cost_model,
                                comm_source="auto" if comm_profile is None else str(comm_profile), robust=robust)
            return func(*args, config=config, **kwargs)

        options = [cost_model_option, click.option(
            "--comm-profile", type=click.Path(file_okay=False, path_type=Path), default=None,
            help=COMM_PROFILE_HELP)]
        if search:
            options.append(click.option(
                "--search", "search_name", type=click.Choice(["ilp", "greedy"]), default="ilp",
                show_default=True, help=SEARCH_HELP))
        options.append(click.option("--time-limit", type=TIME_LIMIT, default=DEFAULT_TIME_LIMIT_S,
                                    show_default=True, help=TIME_LIMIT_HELP))
        if search:
            options.append(click.option(
                "--candidates", "candidate_set", type=click.Choice(["torchrec", "all"]),
                default=DEFAULT_CANDIDATES, show_default=True, help=CANDIDATES_HELP))
            options.append(click.option(
                "--objective", type=click.Choice(["critical-path", "bottleneck"]), default="critical-path",
                show_default=True, help=OBJECTIVE_HELP))
            options.append(click.option(
                "--robust", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
                help=ROBUST_HELP))
        for option in reversed(options):
            wrapper = option(wrapper)
        return wrapper

    return decorate
