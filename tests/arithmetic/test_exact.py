"""Costs that plans are chosen by are the same floats on every CPU (BLAS kernel, numpy's SIMD)."""

from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from conftest import CONFIGS
from shardopt.arithmetic.exact import dot, settled

floats = st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False)


@given(st.lists(st.tuples(floats, floats), max_size=40))
def test_dot_is_the_correctly_rounded_sum_of_the_rounded_products(pairs):
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    exact = sum((Fraction(x * y) for x, y in pairs), Fraction(0))
    assert dot(a, b) == float(exact)
    assert dot(a[::-1], b[::-1]) == dot(a, b)  # order-free, unlike a BLAS sum


@given(st.floats(1e-300, 1e300))
def test_settled_keeps_ten_significant_digits_and_is_idempotent(x):
    assert abs(settled(x) - x) <= 5e-10 * x
    assert settled(settled(x)) == settled(x)


_COSTS = """
import hashlib
from shardopt.core.workload import read_workload
from shardopt.costmodel.registry import resolve_cost_model
from shardopt.contracts import ShardSpec
w, _ = read_workload({path!r})
m, _ = resolve_cost_model("analytic-v0", w)
rows = [m.shard_cost(w, ShardSpec(t, kind, n, t.embedding_dim))
        for t in w.tables for kind, n in (("table_wise", t.num_embeddings), ("row_wise", t.num_embeddings // 64 + 1))]
print(hashlib.sha256(repr([(c.fwd_compute_ms, c.bwd_compute_ms, c.fwd_comm_ms, c.bwd_comm_ms) for c in rows]).encode()).hexdigest())
"""


def test_shard_costs_are_the_same_bits_whichever_kernels_blas_and_numpy_pick():
    """Before, OPENBLAS_CORETYPE=Prescott moved dlrm-large's costs in their last bits and its plan
    by 2% (an AVX2 machine's plan failed the gate baselined on an AVX-512 one)."""
    script = _COSTS.format(path=str(CONFIGS / "dlrm-large.yaml"))
    digests = set()
    for extra in ({}, {"OPENBLAS_CORETYPE": "Prescott", "NPY_DISABLE_CPU_FEATURES": "AVX2 FMA3 F16C AVX"}):
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")}
        out = subprocess.run([sys.executable, "-c", script], env={**env, **extra}, capture_output=True, text=True,
                             check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1
