"""The fuzz table: for each kind of input, mutations that must fail cleanly (or pass), and how.

Each case builds its inputs in a sandbox folder, names the command line to run, and says the
exit code and a fragment of the one error line it expects. ``test_fuzz.py`` runs every case and
checks the promise of the README: that exit code, one line on stderr, no traceback, every input
byte-identical afterwards, no stray file.
"""

from __future__ import annotations

import copy
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

ROOT = Path(__file__).parent.parent
PACKAGED_MODEL = ROOT / "shardopt" / "data" / "models" / "cpu.json"
PACKAGED_PROFILE = ROOT / "shardopt" / "data" / "profiles" / "cpu-full"

# A small GPU workload: no packaged model for h200, so planning prints no calibration warning.
BASE_WORKLOAD: dict = {
    "version": 1,
    "name": "fuzz",
    "batch_size": 64,
    "topology": {"world_size": 2, "compute_device": "cuda", "hbm_cap": "64MB"},
    "tables": [
        {"name": "a", "num_embeddings": 20000, "embedding_dim": 64, "pooling_factor": 4.5,
         "access": {"distribution": "zipf", "alpha": 1.05}},
        {"name": "b", "num_embeddings": 5000, "embedding_dim": 32, "pooling_factor": 12.0,
         "feature_names": ["b", "b_hist"]},
        {"name": "c", "num_embeddings": 300, "embedding_dim": 16, "data_type": "fp16",
         "sharding_types": ["table_wise", "data_parallel"]},
    ],
}
FAST = ("--search", "greedy", "--time-limit", "0.5")


@dataclass
class Case:
    """One fuzz case: ``build(sandbox)`` writes inputs and returns the argv (or calls the API)."""

    id: str
    kind: str
    build: Callable[["Sandbox"], Any]
    code: int
    expect: str = ""  # a fragment of the stderr line
    outputs: tuple[str, ...] = ()  # files a passing case may create (relative to the sandbox)


@dataclass
class Sandbox:
    root: Path
    made: dict = field(default_factory=dict)

    def path(self, name: str) -> Path:
        return self.root / name

    def write(self, name: str, data: str | bytes) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            path.write_text(data)
        else:
            path.write_bytes(data)
        return path

    def workload(self, data: Any = None, name: str = "w.yaml") -> Path:
        return self.write(name, yaml.safe_dump(BASE_WORKLOAD if data is None else data, sort_keys=False))

    def plan(self, data: Any, name: str = "p.json") -> Path:
        return self.write(name, data if isinstance(data, (str, bytes)) else json.dumps(data))


# --- helpers to mutate nested data --------------------------------------------------------------


def _set(data: Any, path: str, value: Any) -> Any:
    """A copy of ``data`` with ``tables.0.embedding_dim`` set (or removed when value is DELETE)."""
    out = copy.deepcopy(data)
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    node = out
    for key in keys[:-1]:
        node = node[key]
    if value is DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return out


DELETE = object()


# --- workload files (shardopt plan) ---------------------------------------------------------------


def _plan_with(data_or_text: Any) -> Callable[[Sandbox], list]:
    def build(box: Sandbox) -> list:
        if isinstance(data_or_text, (str, bytes)):
            path = box.write("w.yaml", data_or_text)
        else:
            path = box.workload(data_or_text)
        return ["plan", path, "-o", box.path("out.json"), *FAST]
    return build


def _workload_field(path: str, value: Any) -> Callable[[Sandbox], list]:
    return _plan_with(_set(BASE_WORKLOAD, path, value))


def _alias_bomb() -> str:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]")
    return "\n".join(lines) + "\n"


BAD_TEXT = [
    ("empty", "", "(top level): must be a mapping, got NoneType"),
    ("comment-only", "# nothing here\n", "(top level): must be a mapping"),
    ("non-utf8", b"version: 1\nname: \xff\xfe\n", "not UTF-8"),
    ("binary", bytes(range(256)) * 4, "not UTF-8"),
    ("tab-indent", "version: 1\n\tname: x\n", "malformed YAML"),
    ("unclosed", "version: 1\ntables: [\n", "malformed YAML"),
    ("alias-bomb", _alias_bomb(), "aliases expand to more than"),
    ("deep-yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n", "nested more than"),
    ("deep-yaml-block", "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v: 1\n",
     "nested more than"),
    ("recursive-alias", "a: &a [*a]\n", "malformed YAML"),
    ("duplicate-top-key", yaml.safe_dump(BASE_WORKLOAD, sort_keys=False) + "batch_size: 128\n", "duplicate key 'batch_size'"),
    ("duplicate-table-key", yaml.safe_dump(BASE_WORKLOAD, sort_keys=False).replace(
        "  embedding_dim: 64\n", "  embedding_dim: 64\n  embedding_dim: 128\n", 1), "duplicate key 'embedding_dim'"),
    ("list-top", "- 1\n- 2\n", "(top level): must be a mapping, got list"),
    ("scalar-top", "42\n", "(top level): must be a mapping, got int"),
    ("python-tag", "!!python/object/apply:os.system ['true']\n", "malformed YAML"),
    ("huge-int-text", yaml.safe_dump(BASE_WORKLOAD, sort_keys=False).replace("batch_size: 64", "batch_size: 1" + "0" * 400),
     "batch_size: must be at most 2**62"),
]

BAD_FIELDS = [
    # (id, path, value, code, fragment)
    ("version-2", "version", 2, 2, "version: input should be 1"),
    ("version-str", "version", "1", 2, "version: input should be 1"),
    ("name-dotdot", "name", "../..", 2, "name: must be a plain file name"),
    ("name-absolute", "name", "/tmp/evil", 2, "name: must be a plain file name"),
    ("name-hidden", "name", ".hidden", 2, "name: must be a plain file name"),
    ("name-slash", "name", "a/b", 2, "name: must be a plain file name"),
    ("name-empty", "name", "", 2, "name: "),
    ("name-nul", "name", "a\x00b", 2, "name: must be a plain file name"),
    ("name-long", "name", "n" * 300, 2, "name: "),
    ("name-int", "name", 5, 2, "name: input should be a valid string"),
    ("batch-zero", "batch_size", 0, 2, "batch_size: input should be greater than 0"),
    ("batch-negative", "batch_size", -1, 2, "batch_size: input should be greater than 0"),
    ("batch-huge", "batch_size", 10**400, 2, "batch_size: must be at most 2**62"),
    ("batch-float", "batch_size", 1e308, 2, "batch_size: input should be a valid integer"),
    ("batch-string", "batch_size", "64", 2, "batch_size: input should be a valid integer"),
    ("batch-bool", "batch_size", True, 2, "batch_size: input should be a valid integer"),
    ("batch-over-bound", "batch_size", 2**30, 2, "batch_size: input should be less than or equal to"),
    ("world-zero", "topology.world_size", 0, 2, "topology.world_size: input should be greater than 0"),
    ("world-huge", "topology.world_size", 10**6, 2, "topology.world_size: input should be less than or equal"),
    ("hbm-typo-unit", "topology.hbm_cap", "80GX", 2, "topology.hbm_cap: must be a size such as 80GB"),
    ("hbm-huge-int", "topology.hbm_cap", 10**400, 2, "topology.hbm_cap: must be at most 2**62"),
    ("hbm-over-eib", "topology.hbm_cap", 2**61, 2, "topology.hbm_cap: must be at most 1 EiB"),
    ("hbm-huge-string", "topology.hbm_cap", "9" * 29 + "TB", 2, "topology.hbm_cap: must be at most 1 EiB"),
    ("hbm-long-digits", "topology.hbm_cap", "9" * 400 + "GB", 2, "topology.hbm_cap: must be a size"),
    ("hbm-negative", "topology.hbm_cap", -5, 2, "topology.hbm_cap: must be a positive size"),
    ("hbm-float", "topology.hbm_cap", 1.5, 2, "topology.hbm_cap: must be a size"),
    ("hbm-nan", "topology.hbm_cap", float("nan"), 2, "topology.hbm_cap: must be a finite number"),
    ("local-not-divisor", "topology.local_world_size", 3, 2, "topology.local_world_size: must divide world_size 2"),
    ("device-tpu", "topology.compute_device", "tpu", 2, "topology.compute_device: input should be 'cuda' or 'cpu'"),
    ("hardware-unknown", "topology.hardware", "zz", 2, "topology.hardware: unknown hardware profile 'zz'"),
    ("bw-nan", "topology.intra_host_bw", float("nan"), 2, "topology.intra_host_bw: must be a finite number"),
    ("bw-inf", "topology.inter_host_bw", float("inf"), 2, "topology.inter_host_bw: must be a finite number"),
    ("bw-zero", "topology.inter_host_bw", 0, 2, "topology.inter_host_bw: input should be greater than 0"),
    ("bw-string", "topology.intra_host_bw", "100", 2, "topology.intra_host_bw: input should be a valid number"),
    ("latency-negative", "topology.comm_latency_us", -1, 2, "topology.comm_latency_us: input should be greater than or equal to 0"),
    ("rows-zero", "tables.0.num_embeddings", 0, 2, "tables[0].num_embeddings: input should be greater than 0"),
    ("rows-huge", "tables.0.num_embeddings", 10**400, 2, "tables[0].num_embeddings: must be at most 2**62"),
    ("rows-over-bound", "tables.0.num_embeddings", 2**41, 2, "tables[0].num_embeddings: input should be less than or equal"),
    ("rows-float", "tables.0.num_embeddings", 20000.5, 2, "tables[0].num_embeddings: input should be a valid integer"),
    ("dim-30", "tables.0.embedding_dim", 30, 2, "tables[0].embedding_dim: must be a positive multiple of 4"),
    ("dim-zero", "tables.0.embedding_dim", 0, 2, "tables[0].embedding_dim: input should be greater than 0"),
    ("dim-huge", "tables.0.embedding_dim", 2**20, 2, "tables[0].embedding_dim: input should be less than or equal"),
    ("dim-bool", "tables.0.embedding_dim", True, 2, "tables[0].embedding_dim: input should be a valid integer"),
    ("pooling-1e308", "tables.0.pooling_factor", 1e308, 2, "tables[0].pooling_factor: input should be less than or equal"),
    ("pooling-nan", "tables.0.pooling_factor", float("nan"), 2, "tables[0].pooling_factor: must be a finite number"),
    ("pooling-zero", "tables.0.pooling_factor", 0, 2, "tables[0].pooling_factor: input should be greater than 0"),
    ("pooling-string", "tables.0.pooling_factor", "15", 2, "tables[0].pooling_factor: input should be a valid number"),
    ("pooling-list", "tables.0.pooling_factor", [1, 2], 2, "tables[0].pooling_factor: input should be a valid number"),
    ("dtype-fp8", "tables.0.data_type", "fp8", 2, "tables[0].data_type: input should be"),
    ("features-empty", "tables.0.feature_names", [], 2, "tables[0].feature_names: must list at least 1"),
    ("feature-duplicate", "tables.1.feature_names", ["a"], 2, "tables[1].feature_names: feature 'a' is also read by tables[0]"),
    ("alpha-huge", "tables.0.access.alpha", 1e308, 2, "tables[0].access.alpha: input should be less than or equal"),
    ("alpha-nan", "tables.0.access.alpha", float("nan"), 2, "tables[0].access.alpha: must be a finite number"),
    ("alpha-zero", "tables.0.access.alpha", 0, 2, "tables[0].access.alpha: input should be greater than 0"),
    ("access-not-mapping", "tables.0.access", "zipf", 2, "tables[0].access"),
    ("hist-bins", "tables.0.access", {"distribution": "histogram", "unique_frac": [1.0], "access_frac": [1.0]}, 2,
     "must list 17 bin fractions"),
    ("hist-sum", "tables.0.access", {"distribution": "histogram", "unique_frac": [0.5] * 17,
                                     "access_frac": [0.5] * 17}, 2, "bin fractions must sum to 1"),
    ("hist-rows-touched", "tables.0.access", {"distribution": "histogram", "unique_frac": [1.0] + [0.0] * 16,
                                              "access_frac": [1.0] + [0.0] * 16, "rows_touched": 10**6}, 2,
     "tables[0].access.rows_touched: must be at most num_embeddings"),
    ("buckets-lengths", "tables.0.access", {"distribution": "buckets", "rows": [1, 2, 3], "weights": [1, 2]}, 2,
     "rows and weights must list the same number of buckets"),
    ("buckets-tiny-weight", "tables.0.access", {"distribution": "buckets", "rows": [1, 2], "weights": [1e-300, 1]}, 2,
     "tables[0].access.weights[0]: input should be greater than or equal"),
    ("buckets-empty", "tables.0.access", {"distribution": "buckets", "rows": [], "weights": []}, 2,
     "must list at least 1"),
    ("sharding-types-empty", "tables.2.sharding_types", [], 2, "tables[2].sharding_types: must list at least 1"),
    ("sharding-types-unknown", "tables.2.sharding_types", ["foo_wise"], 2, "tables[2].sharding_types[0]: input should be"),
    ("kernels-empty", "tables.2.compute_kernels", [], 2, "tables[2].compute_kernels: must list at least 1"),
    ("unknown-field", "tables.0.num_embedings", 5, 2, "tables[0].num_embedings: unknown field; did you mean 'num_embeddings'?"),
    ("unknown-top-field", "batchsize", 5, 2, "batchsize: unknown field; did you mean 'batch_size'?"),
    ("tables-empty", "tables", [], 2, "tables: must list at least 1"),
    ("tables-not-list", "tables", 5, 2, "tables: input should be a valid tuple"),
    ("tables-missing", "tables", DELETE, 2, "tables: required field is missing"),
    ("topology-missing", "topology", DELETE, 2, "topology: required field is missing"),
    ("optimizer-unknown", "optimizer", "lion", 2, "optimizer: input should be"),
    ("table-too-big", "tables.0.num_embeddings", 2**32, 2, "tables[0]: table 'a' needs"),
    ("no-plan-fits", "tables.0.sharding_types", ["table_wise"], 3, "fits on no rank"),
    ("placement-unknown-table", "placement", [{"kind": "pin", "tables": ["zz"], "ranks": [0]}], 2,
     "placement[0].tables: no table 'zz' in the workload"),
    ("placement-rank-outside", "placement", [{"kind": "pin", "tables": ["a"], "ranks": [99]}], 2,
     "placement[0].ranks: rank 99 is not below world_size"),
    ("placement-no-where", "placement", [{"kind": "pin", "tables": ["a"]}], 2, "a pin names ranks or hosts"),
    ("placement-host-outside", "placement", [{"kind": "pin", "tables": ["a"], "hosts": [7]}], 2,
     "placement[0].hosts: host 7 is not below"),
    ("placement-kind-unknown", "placement", [{"kind": "near", "tables": ["a", "b"]}], 2,
     "placement[0].kind: must be one of 'pin', 'colocate', 'apart'"),
    ("placement-group-of-one", "placement", [{"kind": "apart", "tables": ["a"]}], 2,
     "placement[0].tables: must list at least 2"),
    ("placement-twice", "placement", [{"kind": "colocate", "tables": ["a", "a"]}], 2, "lists a table twice"),
    ("ranks-outside", "topology.ranks", [{"ranks": [99], "hbm_cap": "1GB"}], 2, "topology.ranks[0].ranks: rank 99"),
    ("ranks-all-reserved", "topology.ranks", [{"ranks": [0], "reserved": "100TB"}], 2, "keeps no HBM"),
    ("ranks-negative", "topology.ranks", [{"ranks": [-1]}], 2, "topology.ranks[0].ranks[0]"),
    ("parallelism-not-a-block", "parallelism", 2, 2, "parallelism: input should be"),
    ("parallelism-size-missing", "parallelism", {"sync_every": 2}, 2, "parallelism.sharding_group_size: required field is missing"),
    ("parallelism-size-zero", "parallelism", {"sharding_group_size": 0}, 2, "must be a number of ranks"),
    ("parallelism-size-string", "parallelism", {"sharding_group_size": "2"}, 2, "must be a number of ranks"),
    ("parallelism-size-float", "parallelism", {"sharding_group_size": 1.0}, 2, "must be a number of ranks"),
    ("parallelism-size-bool", "parallelism", {"sharding_group_size": True}, 2, "must be a number of ranks"),
    ("parallelism-size-huge", "parallelism", {"sharding_group_size": 2**70}, 2, "parallelism.sharding_group_size: must be at most"),
    ("parallelism-size-not-dividing", "parallelism", {"sharding_group_size": 3}, 2,
     "parallelism.sharding_group_size: must divide world_size 2, got 3"),
    ("parallelism-sync-zero", "parallelism", {"sharding_group_size": 1, "sync_every": 0}, 2, "parallelism.sync_every"),
    ("parallelism-sync-negative", "parallelism", {"sharding_group_size": 1, "sync_every": -4}, 2, "parallelism.sync_every"),
    ("parallelism-sync-huge", "parallelism", {"sharding_group_size": 1, "sync_every": 10**9}, 2, "parallelism.sync_every"),
    ("parallelism-sync-string", "parallelism", {"sharding_group_size": 1, "sync_every": "5"}, 2, "parallelism.sync_every"),
    ("parallelism-strategy-unknown", "parallelism", {"sharding_group_size": 1, "strategy": "grid"}, 2,
     "parallelism.strategy"),
    ("parallelism-fully-sharded-sync", "parallelism", {"sharding_group_size": 1, "strategy": "fully_sharded",
                                                       "sync_every": 3}, 2, "fully_sharded syncs the weights every step"),
    ("parallelism-inter-host-string", "parallelism", {"sharding_group_size": 1, "inter_host_allreduce": "yes"}, 2,
     "parallelism.inter_host_allreduce"),
    ("parallelism-unknown-key", "parallelism", {"sharding_group_size": 1, "groups": 2}, 2, "parallelism.groups"),
]


def workload_cases() -> list[Case]:
    cases = [Case(f"workload-{name}", "workload", _plan_with(text), 2, expect) for name, text, expect in BAD_TEXT]
    cases += [Case(f"workload-{name}", "workload", _workload_field(path, value), code, expect)
              for name, path, value, code, expect in BAD_FIELDS if name != "no-plan-fits"]
    tight = _set(_set(BASE_WORKLOAD, "tables.0.sharding_types", ["table_wise"]), "topology.hbm_cap", "4MB")
    cases.append(Case("workload-no-plan-fits", "workload", _plan_with(tight), 3, "conflict: ranks 0-1 need"))
    small = _set(_set(BASE_WORKLOAD, "parallelism", {"sharding_group_size": 1}), "topology.hbm_cap", "4MB")
    cases.append(Case("workload-parallelism-group-too-small", "workload", _plan_with(small), 3,
                      "parallelism.sharding_group_size: a group of 1 ranks holds"))
    pinned = _set(_set(BASE_WORKLOAD, "parallelism", {"sharding_group_size": 1}), "placement",
                  [{"kind": "pin", "tables": ["a"], "ranks": [1]}])
    cases.append(Case("workload-parallelism-pin-beyond-group", "workload", _plan_with(pinned), 2,
                      "placement[0].ranks: rank 1 is not below world_size 1"))
    cases.append(Case("workload-parallelism-auto-with-pin", "workload",
                      _plan_with(_set(pinned, "parallelism", {"sharding_group_size": "auto"})), 2,
                      "give the group's size, not auto"))
    cases.append(Case("workload-missing-file", "workload",
                      lambda box: ["plan", box.path("nope.yaml"), "-o", box.path("out.json")], 2, "no such workload file"))
    cases.append(Case("workload-a-folder", "workload",
                      lambda box: ["plan", box.root, "-o", box.path("out.json")], 2, "is a directory"))
    cases.append(Case("workload-too-big", "workload", _plan_with("#" * (65 * 2**20)), 2, "more than the"))
    # Anchors and aliases within the limits are ordinary YAML: the plan is made.
    anchors = yaml.safe_dump(BASE_WORKLOAD, sort_keys=False).replace("version: 1\n", "x-defaults: &d 1\nversion: *d\n")
    cases.append(Case("workload-anchors-ok", "workload", _plan_with(anchors), 2, "x-defaults: unknown field"))
    cases.append(Case("workload-good", "workload", _plan_with(BASE_WORKLOAD), 0, outputs=("out.json",)))
    return cases


# --- plan files (shardopt validate, report) -----------------------------------------------------


def good_plan() -> dict:
    return {
        "format": "shardopt-plan", "version": 2, "workload": {"name": "fuzz"}, "world_size": 2,
        "tables": [
            {"name": "a", "sharding_type": "table_wise", "shards": [{"rank": 0, "offsets": [0, 0], "sizes": [20000, 64]}]},
            {"name": "b", "sharding_type": "table_wise", "shards": [{"rank": 1, "offsets": [0, 0], "sizes": [5000, 32]}]},
            {"name": "c", "sharding_type": "table_wise", "shards": [{"rank": 1, "offsets": [0, 0], "sizes": [300, 16]}]},
        ],
        "predicted": {"cost_model": "analytic-v0", "max_ms": 1.0, "lower_bound_ms": 0.5, "per_rank": [
            {"rank": r, "fwd_compute_ms": 0.1, "bwd_compute_ms": 0.2, "fwd_comm_ms": 0.1, "bwd_comm_ms": 0.1,
             "total_ms": 0.5, "hbm_bytes": 1000} for r in (0, 1)]},
    }


def _validate_with(plan: Any) -> Callable[[Sandbox], list]:
    def build(box: Sandbox) -> list:
        return ["validate", box.workload(), box.plan(plan)]
    return build


BAD_PLANS = [
    ("malformed", "{", "malformed JSON: line 1"),
    ("empty", "", "malformed JSON"),
    ("non-utf8", b'{"format": "\xff"}', "not UTF-8"),
    ("nan", json.dumps(_set(good_plan(), "predicted.max_ms", float("nan"))), "NaN is not a number JSON allows"),
    ("infinity", json.dumps(_set(good_plan(), "predicted.max_ms", float("inf"))), "Infinity is not a number"),
    ("deep", "[" * 100_000 + "]" * 100_000, "nested more than"),
    ("deep-64", json.dumps(_set(good_plan(), "workload.name", json.loads("[" * 80 + "]" * 80))), "nested more than"),
    ("huge-int", json.dumps(good_plan()).replace('"world_size": 2', '"world_size": 1' + "0" * 400), "world_size: must be at most 2**62"),
    ("huge-int-digits", json.dumps(good_plan()).replace('"world_size": 2', '"world_size": 1' + "0" * 5000), "malformed JSON"),
    ("numeric-string-world", _set(good_plan(), "world_size", "2"), "world_size: input should be a valid integer"),
    ("numeric-string-ms", _set(good_plan(), "predicted.max_ms", "1.5"), "predicted.max_ms: input should be a valid number"),
    ("numeric-string-rank", _set(good_plan(), "tables.0.shards.0.rank", "0"), "tables[0].shards[0].rank: input should be a valid integer"),
    ("v1-tables-int", {**_set(good_plan(), "tables", 5), "version": 1}, "tables: input should be a valid tuple"),
    ("v2-tables-int", _set(good_plan(), "tables", 5), "tables: input should be a valid tuple"),
    ("per-rank-empty", _set(good_plan(), "predicted.per_rank", []), "predicted.per_rank: must list at least 1"),
    ("format-wrong", _set(good_plan(), "format", "other"), "format: must be 'shardopt-plan'"),
    ("version-5", _set(good_plan(), "version", 5), "version: this shardopt reads plan versions 1, 2, 3, 4, got 5"),
    ("version-bool", _set(good_plan(), "version", True), "version: this shardopt reads plan versions"),
    ("version-list", _set(good_plan(), "version", [2]), "version: this shardopt reads plan versions"),
    ("shards-empty", _set(good_plan(), "tables.0.shards", []), "tables[0].shards: must list at least 1"),
    ("rank-negative", _set(good_plan(), "tables.0.shards.0.rank", -1), "tables[0].shards[0].rank"),
    ("offsets-short", _set(good_plan(), "tables.0.shards.0.offsets", [0]), "tables[0].shards[0].offsets"),
    ("sizes-zero", _set(good_plan(), "tables.0.shards.0.sizes", [0, 64]), "tables[0].shards[0].sizes[0]"),
    ("unknown-field", _set(good_plan(), "tables.0.colour", "red"), "tables[0].colour: unknown field"),
    ("sharding-type-bogus", _set(good_plan(), "tables.0.sharding_type", "bogus"), "tables[0].sharding_type"),
    ("kernel-bogus", _set(good_plan(), "tables.0.compute_kernel", "bogus"), "tables[0].compute_kernel"),
    ("load-factor-2", _set(good_plan(), "tables.0.cache_load_factor", 2.0), "tables[0].cache_load_factor"),
    ("world-huge", _set(good_plan(), "world_size", 10**9), "world_size: input should be less than or equal"),
    ("list-top", [1, 2], "(top level): must be a mapping"),
    ("v1-with-v2-field", {**_set(good_plan(), "tables.0.replicated_rows", 5), "version": 1},
     "tables[0].replicated_rows: not a version 1 field"),
]


def plan_cases() -> list[Case]:
    cases = [Case(f"plan-{name}", "plan", _validate_with(plan), 2, expect) for name, plan, expect in BAD_PLANS]
    cases.append(Case("plan-missing", "plan", lambda box: ["validate", box.workload(), box.path("nope.json")], 2,
                      "no such plan file"))
    cases.append(Case("plan-a-folder", "plan", lambda box: ["validate", box.workload(), box.root], 2,
                      "Invalid value for 'PLAN'"))
    cases.append(Case("plan-invalid-is-exit-1", "plan",
                      _validate_with(_set(good_plan(), "tables.0.shards.0.rank", 5)), 1, "invalid, 1 violation"))
    cases.append(Case("plan-report-empty-per-rank", "plan",
                      lambda box: ["report", box.plan(_set(good_plan(), "predicted.per_rank", [])),
                                   "-o", box.path("bars.png")], 2, "predicted.per_rank: must list at least 1"))
    cases.append(Case("plan-report-no-prediction", "plan",
                      lambda box: ["report", box.plan(_set(good_plan(), "predicted", DELETE)),
                                   "-o", box.path("bars.png")], 2, "holds no prediction; pass --workload"))
    cases.append(Case("plan-good", "plan", _validate_with(good_plan()), 0))
    return cases


# --- traces (shardopt stats) --------------------------------------------------------------------


def _trace_bytes(obj: Any, gz: bool = True) -> bytes:
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return gzip.compress(buffer.getvalue(), mtime=0) if gz else buffer.getvalue()


def _good_trace():
    import torch

    lengths = torch.tensor([[2, 1, 0, 3], [1, 1, 1, 1]], dtype=torch.int64)
    indices = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], dtype=torch.int64)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths.flatten(), 0)])
    return indices, offsets, lengths


def _trace_variant(name: str):
    import torch

    indices, offsets, lengths = _good_trace()
    if name == "float-ids":
        return indices.double(), offsets, lengths
    if name == "nan-ids":
        return torch.full_like(indices, float("nan"), dtype=torch.float32), offsets, lengths
    if name == "bool-ids":
        return indices > 3, offsets, lengths
    if name == "negative-ids":
        return indices - 5, offsets, lengths
    if name == "decreasing-offsets":
        bad = offsets.clone()
        bad[1], bad[2] = bad[2].item(), bad[1].item()
        return indices, bad, lengths
    if name == "lengths-disagree":
        bad = lengths.clone()
        bad[0, 0], bad[0, 1] = 1, 2
        return indices, offsets, bad
    if name == "lengths-1d":
        return indices, offsets, lengths.flatten()
    if name == "offsets-short":
        return indices, offsets[:-2], lengths
    if name == "offsets-not-from-0":
        return indices, offsets + 1, lengths
    if name == "huge-ids":
        return indices + 2**50, offsets, lengths
    if name == "two-items":
        return indices, offsets
    if name == "dict":
        return {"indices": indices}
    if name == "list-ids":
        return [1, 2, 3], offsets, lengths
    if name == "empty-batch":
        return indices[:0], torch.zeros(1, dtype=torch.int64), lengths[:, :0]
    raise KeyError(name)


BAD_TRACES = [
    ("float-ids", "indices: must hold integers"),
    ("nan-ids", "indices: must hold integers"),
    ("bool-ids", "indices: must hold integers"),
    ("negative-ids", "ids must not be negative"),
    ("decreasing-offsets", "decreases"),
    ("lengths-disagree", "but the offsets give the bag"),
    ("lengths-1d", "lengths: must be [tables, batch]"),
    ("offsets-short", "offsets: must have tables*batch+1"),
    ("offsets-not-from-0", "offsets: must have tables*batch+1"),
    ("huge-ids", "ids must be below 2**40"),
    ("two-items", "a trace holds (indices, offsets, lengths)"),
    ("dict", "a trace holds (indices, offsets, lengths)"),
    ("list-ids", "indices: must be a tensor"),
    ("empty-batch", "lengths: must be [tables, batch] with both > 0"),
]


def _stats_with(data: bytes, name: str = "t.pt.gz") -> Callable[[Sandbox], list]:
    def build(box: Sandbox) -> list:
        return ["stats", box.write(name, data), "-o", box.path("w.yaml")]
    return build


def trace_cases() -> list[Case]:
    cases = [Case(f"trace-{name}", "trace", lambda box, n=name: _stats_with(_trace_bytes(_trace_variant(n)))(box),
                  2, expect) for name, expect in BAD_TRACES]
    cases += [
        Case("trace-empty-file", "trace", _stats_with(b""), 2, "not a readable trace"),
        Case("trace-garbage", "trace", _stats_with(b"garbage" * 100, "t.pt"), 2, "not a readable trace"),
        Case("trace-gz-garbage", "trace", _stats_with(gzip.compress(b"garbage", mtime=0)), 2, "not a readable trace"),
        Case("trace-missing", "trace", lambda box: ["stats", box.path("nope.pt"), "-o", box.path("w.yaml")], 2,
             "no such file"),
        Case("trace-a-folder", "trace", lambda box: ["stats", box.root, "-o", box.path("w.yaml")], 2,
             "Invalid value for '[TRACE]'"),
        Case("trace-bad-name-option", "trace",
             lambda box: ["stats", box.write("t.pt.gz", _trace_bytes(_good_trace())), "--name", "../x",
                          "-o", box.path("w.yaml")], 2, "--name: must be a plain file name"),
        Case("trace-dim-option", "trace",
             lambda box: ["stats", box.write("t.pt.gz", _trace_bytes(_good_trace())), "--dim", "30",
                          "-o", box.path("w.yaml")], 2, "--dim: must be a positive multiple of 4, got 30"),
        Case("trace-good", "trace", lambda box: _stats_with(_trace_bytes(_good_trace()))(box), 0, outputs=("w.yaml",)),
    ]
    return cases


# --- torch.profiler traces of a training job (shardopt trace ingest / report) --------------------

KINETO = ROOT / "tests" / "traces" / "fixtures" / "cuda"


def _kineto_rank(rank: int) -> dict:
    path = KINETO / ("rank0.json.gz" if rank == 0 else "rank1.json")
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def _kineto(command: str = "report", rank0: Any = None, rank1: Any = "keep", plan: Any = None,
            extra: tuple = ()) -> Callable[[Sandbox], list]:
    """``trace COMMAND`` on the fixture's two ranks, rank 0 replaced by ``rank0`` (a mutated trace,
    or text/bytes), rank 1 left out when None."""
    def build(box: Sandbox) -> list:
        first = _kineto_rank(0) if rank0 is None else rank0(_kineto_rank(0)) if callable(rank0) else rank0
        files = [box.write("t/rank0.json", first if isinstance(first, (str, bytes)) else json.dumps(first))]
        if rank1 is not None:
            second = _kineto_rank(1) if rank1 == "keep" else rank1(_kineto_rank(1))
            files.append(box.write("t/rank1.json", json.dumps(second)))
        argv = ["trace", command, *files, "--workload", box.workload(), "--plan",
                box.plan(good_plan() if plan is None else plan)]
        return argv + [a(box) if callable(a) else a for a in extra]
    return build


def _kineto_set(path: str, value: Any) -> Callable[[dict], dict]:
    return lambda trace: _set(trace, path, value)


def _kineto_drop(test: Callable[[dict], bool]) -> Callable[[dict], dict]:
    def mutate(trace: dict) -> dict:
        return {**trace, "traceEvents": [e for e in trace["traceEvents"] if not test(e)]}
    return mutate


def _all_on_rank0() -> dict:
    plan = good_plan()
    for t in plan["tables"]:
        t["shards"][0]["rank"] = 0
    return plan


def _gate_trace(plan: Any = None, with_plan: bool = True, tolerance: str = "99%") -> Callable[[Sandbox], list]:
    """``gate --trace DIR`` alone: DIR holds the fixture's ranks and (``with_plan``) plan.json."""
    def build(box: Sandbox) -> list:
        box.write("job/rank0.json", json.dumps(_kineto_rank(0)))
        box.write("job/rank1.json", json.dumps(_kineto_rank(1)))
        if with_plan:
            box.plan(good_plan() if plan is None else plan, "job/plan.json")
        return ["gate", box.workload(), "--trace", box.path("job"), "--trace-tolerance", tolerance]
    return build


def kineto_cases() -> list[Case]:
    text = (KINETO / "rank1.json").read_text()
    return [
        Case("kineto-gate-trace-within-tolerance", "kineto", _gate_trace(), 0),
        Case("kineto-gate-trace-drifted", "kineto", _gate_trace(tolerance="0%"), 1),
        Case("kineto-gate-trace-no-plan", "kineto", _gate_trace(with_plan=False), 2, "no plan.json in it"),
        Case("kineto-gate-trace-other-workload", "kineto",
             _gate_trace(plan={**good_plan(), "workload": {"name": "other"}}), 2, "'other' is none of the workloads"),
        Case("kineto-gate-trace-bad-tolerance", "kineto", _gate_trace(tolerance="abc"), 2, "--trace-tolerance"),
        Case("kineto-gate-without-baseline-or-trace", "kineto", lambda box: ["gate", box.workload()], 2,
             "--baseline: required"),
        Case("kineto-good-report", "kineto", _kineto(), 0),
        Case("kineto-truncated", "kineto", _kineto(rank0=text[: len(text) // 2]), 2, "not a Chrome-trace JSON file"),
        Case("kineto-garbage-gz", "kineto", _kineto(rank0=gzip.compress(b"{not json", mtime=0)), 2,
             "not a Chrome-trace JSON file"),
        Case("kineto-foreign-json", "kineto", _kineto(rank0={"foo": 1}), 2, "traceEvents: missing"),
        Case("kineto-list-of-numbers", "kineto", _kineto(rank0=[1, 2]), 2, "a list, but not of traces"),
        Case("kineto-no-distributed-info", "kineto", _kineto(rank0=_kineto_set("distributedInfo", DELETE)), 2,
             "distributedInfo.rank: missing"),
        Case("kineto-rank-outside-world", "kineto", _kineto(rank0=_kineto_set("distributedInfo.rank", 5)), 2,
             "is outside world_size 2"),
        Case("kineto-no-steps", "kineto",
             _kineto(rank0=_kineto_drop(lambda e: e.get("name", "").startswith("ProfilerStep"))), 2,
             "no ProfilerStep#N spans"),
        Case("kineto-no-tbe-events", "kineto",
             _kineto(rank0=_kineto_drop(lambda e: e.get("cat") == "kernel" or e.get("name", "").startswith("c10d"))),
             2, "no TBE (FBGEMM embedding) events"),
        Case("kineto-missing-rank", "kineto", _kineto(rank1=None), 2, "no trace of rank(s) 1"),
        Case("kineto-rank-twice", "kineto", _kineto(rank0=_kineto_set("distributedInfo.rank", 1)), 2, "rank 1 again"),
        Case("kineto-other-world", "kineto",
             _kineto(rank0=_kineto_set("distributedInfo.world_size", 4),
                     rank1=_kineto_set("distributedInfo.world_size", 4)), 2, "distributedInfo.world_size: 4"),
        Case("kineto-other-plan", "kineto", _kineto(plan=_all_on_rank0()), 2, "a trace of another plan"),
        Case("kineto-cpu-trace-of-gpu-job", "kineto",
             _kineto(rank0=lambda t: {**t, "traceEvents": [{**e, "cat": "cpu_op"} if e.get("cat") == "kernel" else e
                                                          for e in t["traceEvents"]]}), 2, "a trace of cpu kernels"),
        Case("kineto-warmup-eats-every-step", "kineto", _kineto(extra=("--warmup", "4")), 2,
             "none left after the 4 warm-up step(s)"),
        Case("kineto-missing-file", "kineto",
             lambda box: ["trace", "report", box.path("nope.json"), "--workload", box.workload(), "--plan",
                          box.plan(good_plan())], 2, "no such trace file or folder"),
        Case("kineto-empty-folder", "kineto",
             lambda box: ["trace", "report", box.write("t/readme.txt", "x").parent, "--workload", box.workload(),
                          "--plan", box.plan(good_plan())], 2, "no trace files"),
        Case("kineto-png-suffix", "kineto", _kineto(extra=("--png", lambda box: box.path("bars.jpg"))), 2, "--png"),
        Case("kineto-ingest-no-packaged-model", "kineto", _kineto("ingest", extra=("-o", lambda box: box.path("m.json"))),
             2, "no packaged model for hardware"),
        Case("kineto-ingest-over-its-input", "kineto",
             _kineto("ingest", extra=("--base", str(PACKAGED_MODEL), "-o", lambda box: box.path("t/rank1.json"))), 2,
             "rank1.json"),
    ]


# --- cost-model files (shardopt plan --cost-model PATH) -----------------------------------------


def _model_with(mutate: Callable[[dict], Any] | str | bytes) -> Callable[[Sandbox], list]:
    def build(box: Sandbox) -> list:
        if isinstance(mutate, (str, bytes)):
            model = box.write("m.json", mutate)
        else:
            data = json.loads(PACKAGED_MODEL.read_text())
            model = box.write("m.json", json.dumps(mutate(data)))
        return ["plan", box.workload(), "--cost-model", model, "-o", box.path("out.json"), *FAST]
    return build


def _m(path: str, value: Any) -> Callable[[dict], dict]:
    return lambda data: _set(data, path, value)


BAD_MODELS = [
    ("not-json", "not json", "malformed JSON"),
    ("list", "[]", "format: not a shardopt cost model"),
    ("format", _m("format", "x"), "format: not a shardopt cost model"),
    ("version", _m("version", 1), "version: this shardopt reads cost-model versions 2-3"),
    ("fwd-nan", _m("calibration.fwd.0", float("nan")), "NaN is not a number JSON allows"),
    ("fwd-short", lambda d: _set(d, "calibration.fwd", d["calibration"]["fwd"][:-1]), "calibration.fwd: must hold"),
    ("fwd-negative", _m("calibration.fwd.0", -1.0), "calibration.fwd: must be at least 0"),
    ("fwd-strings", lambda d: _set(d, "calibration.fwd", ["1"] * len(d["calibration"]["fwd"])), "calibration.fwd: must be a list of numbers"),
    ("calibration-missing", _m("calibration", DELETE), "calibration: must be a mapping"),
    ("comm-bad-key", _m("calibration.comm", {"two": [0, 0]}), "calibration.comm: must map world sizes"),
    ("features-wrong-length", lambda d: _set(d, "features.mean", d["features"]["mean"] + [0.0]), "features.mean: must hold"),
    ("features-std-zero", lambda d: _set(d, "features.std", [0.0] * len(d["features"]["std"])), "features.std: every entry must be positive"),
    ("kernel-nets-empty", _m("kernel_nets", []), "kernel_nets: must list at least one"),
    ("kernel-nets-wrong-shape", lambda d: _set(d, "kernel_nets.0", {k: [0.0] for k in d["kernel_nets"][0]}),
     "kernel_nets[0]: weights do not fit the net"),
    ("kernel-nets-missing-key", lambda d: _set(d, "kernel_nets.0", dict(list(d["kernel_nets"][0].items())[1:])),
     "kernel_nets[0]: weights do not fit the net"),
    ("comm-net-missing", _m("comm_net", DELETE), "comm_net: must be a mapping"),
    ("hardware-int", _m("hardware", 5), "hardware: must be a string"),
    ("llc-negative", _m("calibration.llc_bytes", -1), "calibration.llc_bytes: must be a positive integer"),
]


def model_cases() -> list[Case]:
    cases = [Case(f"model-{name}", "cost-model", _model_with(mutate), 2, expect) for name, mutate, expect in BAD_MODELS]
    cases.append(Case("model-a-folder", "cost-model",
                      lambda box: ["plan", box.workload(), "--cost-model", box.write("models/m.json", "{}").parent,
                                   "-o", box.path("out.json")], 2, "is a folder, not a cost-model file"))
    cases.append(Case("model-unknown-name", "cost-model",
                      lambda box: ["plan", box.workload(), "--cost-model", "magic", "-o", box.path("out.json")], 2,
                      "--cost-model magic: neither a model name"))
    return cases


# --- profile folders (shardopt train, replay --comm-profile, profile resume) ---------------------


def _profile(box: Sandbox, manifest: Any = None, lines: list | None = None, raw: bytes | None = None) -> Path:
    folder = box.path("prof")
    folder.mkdir(exist_ok=True)
    if manifest is not False:
        data = json.loads((PACKAGED_PROFILE / "manifest.json").read_text()) if manifest is None else manifest
        (folder / "manifest.json").write_text(data if isinstance(data, str) else json.dumps(data))
    if raw is not None:
        (folder / "points.jsonl").write_bytes(raw)
    else:
        if lines is None:
            with open(PACKAGED_PROFILE / "points.jsonl") as handle:
                lines = [json.loads(next(handle)) for _ in range(40)]
        (folder / "points.jsonl").write_text("".join(
            (line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return folder


def _first_points(n: int = 5) -> list[dict]:
    with open(PACKAGED_PROFILE / "points.jsonl") as handle:
        return [json.loads(next(handle)) for _ in range(n)]


def _train_with(**kwargs) -> Callable[[Sandbox], list]:
    return lambda box: ["train", _profile(box, **kwargs), "-o", box.path("m.json")]


def _point(path: str, value: Any) -> list:
    points = _first_points()
    points[2] = _set(points[2], path, value)
    return points


def _a2a_free_replay(box: Sandbox) -> list:
    folder = _profile(box, lines=_first_points())  # kernels only: no all-to-all point
    return ["replay", box.workload(), box.plan(good_plan()), "--comm-profile", folder]


def _unit_comm_replay(box: Sandbox) -> list:
    """A unit-preset profile: one all-to-all point, even splits only (replay needs pooled too)."""
    point = {"backend": "gloo", "device": "cpu", "key": "k1", "kind": "a2a", "message_bytes": 1024,
             "pattern": "even", "timing": {"median_us": 250.0, "runs": 10}, "world_size": 2}
    folder = _profile(box, lines=[point])
    return ["replay", box.workload(), box.plan(good_plan()), "--comm-profile", folder]


def _resume_other(field_name: str, value: Any) -> Callable[[Sandbox], list]:
    def build(box: Sandbox) -> list:
        from shardopt.profile.dataset import machine_metadata

        manifest = {"format": "shardopt-profile", "version": 1, "preset": "unit", "seed": 0, "backend": "fbgemm",
                    "distinct_batches": 8, **machine_metadata("cpu")}
        from shardopt import __version__

        manifest["shardopt"] = __version__
        manifest[field_name] = value
        folder = _profile(box, manifest=manifest, lines=[])
        return ["profile", "--preset", "unit", "--backend", "fbgemm", "-o", folder]
    return build


def profile_cases() -> list[Case]:
    return [
        Case("profile-manifest-list", "profile", _train_with(manifest=[1, 2]), 2, "(top level): must be a mapping, got list"),
        Case("profile-manifest-garbage", "profile", _train_with(manifest="{nope"), 2, "manifest.json: malformed JSON"),
        Case("profile-manifest-missing", "profile", _train_with(manifest=False), 2, "not a profile dataset (no manifest.json)"),
        Case("profile-manifest-nan", "profile", _train_with(manifest='{"format": NaN}'), 2, "NaN is not a number"),
        Case("profile-manifest-format", "profile", _train_with(manifest={"format": "x"}), 2, "format: must be 'shardopt-profile'"),
        Case("profile-garbage-line", "profile", _train_with(lines=_first_points()[:2] + ["garbage"] + _first_points()[2:]),
             2, "points.jsonl: line 3: not a JSON record"),
        Case("profile-non-utf8-line", "profile", _train_with(raw=b"\xff\xfe\n" + json.dumps(_first_points(1)[0]).encode() + b"\n"),
             2, "points.jsonl: line 1: not UTF-8"),
        Case("profile-nan-median", "profile", _train_with(lines=[json.dumps(p) for p in _point("fwd.median_us", float("nan"))]),
             2, "line 3: NaN is not a measurement"),
        Case("profile-negative-median", "profile", _train_with(lines=_point("fwd.median_us", -1.0)), 2,
             "line 3: fwd.median_us: input should be greater than 0"),
        Case("profile-rows-zero", "profile", _train_with(lines=_point("tables.0.rows", 0)), 2,
             "line 3: tables[0].rows: input should be greater than 0"),
        Case("profile-dim-30", "profile", _train_with(lines=_point("tables.0.dim", 30)), 2, "line 3: tables[0].dim"),
        Case("profile-kind-unknown", "profile", _train_with(lines=_point("kind", "gpu-magic")), 2, "line 3: kind: must be one of"),
        Case("profile-record-list", "profile", _train_with(lines=_first_points(2) + ["[1, 2]"]), 2, "line 3: must be a JSON object"),
        Case("profile-too-few-points", "profile", _train_with(lines=_first_points(5)), 2, "only 5 kernel points"),
        Case("profile-torn-tail-skipped", "profile",
             _train_with(raw=b"".join(json.dumps(p).encode() + b"\n" for p in _first_points(4)) + b'{"kind": "tb'),
             2, "only 4 kernel points"),
        Case("profile-folder-is-file", "profile", lambda box: ["train", box.write("f", "x"), "-o", box.path("m.json")], 2,
             "Invalid value for 'PROFILE'"),
        Case("profile-folder-missing", "profile", lambda box: ["train", box.path("nope"), "-o", box.path("m.json")], 2,
             "not a profile dataset"),
        Case("profile-comm-none", "profile", _a2a_free_replay, 2, "the profile holds no all-to-all points"),
        Case("profile-comm-unit-preset", "profile", _unit_comm_replay, 2,
             "no all-to-all of both patterns (even, pooled) measured at world size 2"),
        Case("profile-comm-not-profile", "profile",
             lambda box: ["replay", box.workload(), box.plan(good_plan()), "--comm-profile", box.root], 2,
             "not a profile dataset"),
        Case("profile-resume-other-cpu", "profile", _resume_other("cpu_id", "OtherVendor/1/2/3 avx2"), 2,
             "cpu_id: the dataset was measured with"),
        Case("profile-resume-other-torch", "profile", _resume_other("torch", "1.0.0"), 2, "torch: the dataset was measured with"),
        Case("profile-resume-other-cores", "profile", _resume_other("cores", 999), 2, "cores: the dataset was measured with"),
        Case("profile-resume-other-fbgemm", "profile", _resume_other("fbgemm_gpu", "0.1"), 2, "fbgemm_gpu: the dataset"),
        Case("profile-resume-other-shardopt", "profile", _resume_other("shardopt", "0.0.1"), 2, "shardopt: the dataset"),
        Case("profile-points-without-manifest", "profile",
             lambda box: ["profile", "--preset", "unit", "-o", _profile(box, manifest=False)], 2,
             "not a profile dataset (no manifest.json)"),
        Case("profile-output-is-file", "profile", lambda box: ["profile", "--preset", "unit", "-o", box.write("f", "x")], 2,
             "is a file"),
    ]


# --- output paths ---------------------------------------------------------------------------------


def _symlink(box: Sandbox, name: str, target: Path) -> Path:
    link = box.path(name)
    link.symlink_to(target)
    return link


def output_cases() -> list[Case]:
    return [
        Case("out-plan-onto-workload", "output", lambda box: ["plan", box.workload(), "-o", box.path("w.yaml")], 2,
             "must end in .json"),
        Case("out-plan-onto-workload-json", "output",
             lambda box: ["plan", box.workload(name="w.json"), "-o", box.path("w.json")], 2,
             "is this command's input"),
        Case("out-plan-symlink-to-input", "output",
             lambda box: ["plan", box.workload(name="w.json"), "-o", _symlink(box, "l.json", box.path("w.json"))], 2,
             "is this command's input"),
        Case("out-plan-onto-model", "output",
             lambda box: ["plan", box.workload(), "--cost-model", box.write("m.json", PACKAGED_MODEL.read_bytes()),
                          "-o", box.path("m.json")], 2, "is this command's input"),
        Case("out-plan-a-folder", "output", lambda box: ["plan", box.workload(), "-o", box.path("d.json")]
             if box.path("d.json").mkdir() is None else [], 2, "is a directory"),
        Case("out-plan-missing-folder", "output", lambda box: ["plan", box.workload(), "-o", box.path("no/p.json")], 2,
             "the folder"),
        Case("out-plan-parent-is-file", "output",
             lambda box: ["plan", box.workload(), "-o", box.write("f", "x") / "p.json"], 2, "is a file, not a folder"),
        Case("out-plan-name-too-long", "output", lambda box: ["plan", box.workload(), "-o", box.path("p" * 300 + ".json")], 2,
             "longer than this file system allows"),
        Case("out-plan-wrong-extension", "output", lambda box: ["plan", box.workload(), "-o", box.path("p.txt")], 2,
             "must end in .json"),
        Case("out-plan-default-plans-is-file", "output", _default_output_plans_file, 2, "plans is a file, not a folder"),
        Case("out-report-onto-plan", "output", lambda box: ["report", box.plan(good_plan(), "p.png"), "-o", box.path("p.png")], 2,
             "is this command's input"),
        Case("out-report-jpg", "output", lambda box: ["report", box.plan(good_plan()), "-o", box.path("p.jpg")], 2,
             "must end in .png or .svg or .pdf"),
        Case("out-stats-onto-trace", "output",
             lambda box: ["stats", box.write("t.yaml", _trace_bytes(_good_trace(), gz=False)), "-o", box.path("t.yaml")], 2,
             "is this command's input"),
        Case("out-train-into-profile", "output",
             lambda box: ["train", _profile(box), "-o", box.path("prof/points.json")], 2, "lies inside the input folder"),
        Case("out-train-onto-points", "output",
             lambda box: ["train", _profile(box), "-o", box.path("prof/points.jsonl")], 2, "must end in .json"),
        Case("out-synth-a-folder", "output",
             lambda box: ["synth", "--name", "s", "--tables", "2", "--world-size", "2", "-o", box.root], 2,
             "is a directory"),
        Case("out-synth-json", "output",
             lambda box: ["synth", "--name", "s", "--tables", "2", "--world-size", "2", "-o", box.path("s.json")], 2,
             "must end in .yaml or .yml"),
        Case("out-bench-output-is-file", "output", lambda box: ["bench", "--suite", "unit", "-o", box.write("f", "x")], 2,
             "is a file"),
        Case("out-bench-missing-baseline", "output",
             lambda box: ["bench", "--suite", "unit", "--check", box.path("nope.json")], 2, "no such baseline"),
        Case("out-bench-bad-baseline", "output",
             lambda box: ["bench", "--suite", "unit", "--check", box.write("b.json", '{"format": "x"}')], 2, "format: must be"),
        Case("out-bench-update-txt", "output",
             lambda box: ["bench", "--suite", "unit", "--check", box.path("b.txt"), "--update"], 2, "must end in .json"),
        Case("out-from-torchrec-missing-folder", "output",
             lambda box: ["from-torchrec", "x:y", "--world-size", "2", "--batch-size", "8", "-o", box.path("no/w.yaml")], 2,
             "the folder"),
    ]


def _default_output_plans_file(box: Sandbox) -> list:
    box.write("plans", "a file where the plans folder would go")
    return ["plan", box.workload(), *FAST, "__chdir__"]


# --- CLI options ----------------------------------------------------------------------------------


def _plan_opt(*opts: str) -> Callable[[Sandbox], list]:
    return lambda box: ["plan", box.workload(), "-o", box.path("out.json"), *opts]


def _synth_opt(*opts: str) -> Callable[[Sandbox], list]:
    base = {"--name": "s", "--tables": "3", "--world-size": "2"}
    given = dict(zip(opts[::2], opts[1::2]))
    args = [x for k, v in {**base, **given}.items() for x in (k, v)]
    return lambda box: ["synth", *args, "-o", box.path("s.yaml")]


def option_cases() -> list[Case]:
    cases = [
        Case(f"opt-time-limit-{v}", "option", _plan_opt("--time-limit", v), 2, "--time-limit")
        for v in ("nan", "inf", "1e300", "0", "-1", "abc", "-inf")
    ]
    cases += [
        Case("opt-seed-negative", "option", _synth_opt("--seed", "-1"), 2, "--seed"),
        Case("opt-seed-huge", "option", _synth_opt("--seed", str(2**40)), 2, "--seed"),
        Case("opt-rows-scale-nan", "option", _synth_opt("--rows-scale", "nan"), 2, "--rows-scale"),
        Case("opt-rows-scale-zero", "option", _synth_opt("--rows-scale", "0"), 2, "--rows-scale"),
        Case("opt-rows-scale-inf", "option", _synth_opt("--rows-scale", "inf"), 2, "--rows-scale"),
        Case("opt-tables-zero", "option", _synth_opt("--tables", "0"), 2, "--tables"),
        Case("opt-world-zero", "option", _synth_opt("--world-size", "0"), 2, "--world-size"),
        Case("opt-dims-not-int", "option", _synth_opt("--dims", "16,x"), 2, "--dims"),
        Case("opt-dims-30", "option", _synth_opt("--dims", "30"), 2, "--dims: must be a positive multiple of 4"),
        Case("opt-hbm-cap-typo", "option", _synth_opt("--hbm-cap", "1XB"), 2, "--hbm-cap: must be a size"),
        Case("opt-hbm-cap-tiny", "option", _synth_opt("--hbm-cap", "1KB"), 2, "--hbm-cap"),
        Case("opt-local-world", "option", _synth_opt("--local-world-size", "3"), 2, "--local-world-size: must divide"),
        Case("opt-hardware", "option", _synth_opt("--hardware", "zz"), 2, "--hardware: unknown hardware profile"),
        Case("opt-name-path", "option", _synth_opt("--name", "../../x"), 2, "--name: must be a plain file name"),
        Case("opt-search-annealing", "option", _plan_opt("--search", "annealing"), 2, "--search"),
        Case("opt-objective", "option", _plan_opt("--objective", "fast"), 2, "--objective"),
        Case("opt-candidates", "option", _plan_opt("--candidates", "some"), 2, "--candidates"),
        Case("opt-missing-argument", "option", lambda box: ["plan"], 2, "Missing argument 'WORKLOAD'"),
        Case("opt-unknown-option", "option", _plan_opt("--colour"), 2, "No such option '--colour'"),
        Case("opt-unknown-command", "option", lambda box: ["plann"], 2, "No such command 'plann'"),
        Case("opt-replay-iters-zero", "option",
             lambda box: ["replay", box.workload(), box.plan(good_plan()), "--iters", "0"], 2, "--iters"),
        Case("opt-profile-preset", "option", lambda box: ["profile", "--preset", "huge", "-o", box.path("d")], 2, "--preset"),
        Case("opt-bench-update-without-check", "option", lambda box: ["bench", "--suite", "unit", "--update"], 2,
             "--update: needs --check FILE"),
        Case("opt-bench-unknown-planner", "option", lambda box: ["bench", "--suite", "unit", "--planners", "x"], 2,
             "--planners: unknown x"),
        Case("opt-from-torchrec-hbm", "option",
             lambda box: ["from-torchrec", "x:y", "--world-size", "2", "--batch-size", "8", "--hbm-cap", "lots",
                          "-o", box.path("w.yaml")], 2, "--hbm-cap: must be a size"),
        Case("opt-from-torchrec-local", "option",
             lambda box: ["from-torchrec", "x:y", "--world-size", "4", "--local-world-size", "3", "--batch-size", "8",
                          "-o", box.path("w.yaml")], 2, "--local-world-size: must divide"),
    ]
    return cases


# --- TorchRec factories (shardopt from-torchrec) ----------------------------------------------------

FACTORY_MODULE = '''
import torch
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection


def good():
    return EmbeddingBagCollection(device=torch.device("meta"), tables=[
        EmbeddingBagConfig(name="t0", embedding_dim=16, num_embeddings=100, feature_names=["f0"])])


def raises():
    raise RuntimeError("the factory broke\\nsecond line")


def returns_none():
    return None


not_callable = 5


def bad_dim():
    return EmbeddingBagCollection(device=torch.device("meta"), tables=[
        EmbeddingBagConfig(name="t0", embedding_dim=16, num_embeddings=2**45, feature_names=["f0"])])


def bad_constraints():
    return good(), ["not", "a", "dict"]


def unknown_constraint():
    from torchrec.distributed.planner.types import ParameterConstraints

    return good(), {"t9": ParameterConstraints(sharding_types=["table_wise"])}
'''


def _factory(attr: str, module: str = "fuzzfactory", source: str = FACTORY_MODULE, *extra: str):
    def build(box: Sandbox) -> list:
        box.write(f"{module}.py", source)
        return ["from-torchrec", f"{module}:{attr}", "--world-size", "2", "--batch-size", "8",
                "-o", box.path("w.yaml"), *extra, "__chdir__"]
    return build


def torchrec_cases() -> list[Case]:
    return [
        Case("torchrec-factory-raises", "torchrec", _factory("raises"), 2, "calling it raised RuntimeError: the factory broke second line"),
        Case("torchrec-factory-none", "torchrec", _factory("returns_none"), 2, "returned NoneType, not a torch.nn.Module"),
        Case("torchrec-not-callable", "torchrec", _factory("not_callable"), 2, "not_callable is a int, not a callable"),
        Case("torchrec-module-fails", "torchrec", _factory("good", "brokenmod", "raise ValueError('import broke')\n"), 2,
             "importing brokenmod raised ValueError: import broke"),
        Case("torchrec-module-syntax", "torchrec", _factory("good", "syntaxmod", "def (:\n"), 2, "importing syntaxmod raised SyntaxError"),
        Case("torchrec-module-missing", "torchrec",
             lambda box: ["from-torchrec", "no_such_module_x:make", "--world-size", "2", "--batch-size", "8",
                          "-o", box.path("w.yaml")], 2, "No module named 'no_such_module_x'"),
        Case("torchrec-attr-missing", "torchrec", _factory("nope"), 2, "has no attribute 'nope'"),
        Case("torchrec-spec-shape", "torchrec",
             lambda box: ["from-torchrec", "justamodule", "--world-size", "2", "--batch-size", "8", "-o", box.path("w.yaml")],
             2, "FACTORY: expected 'package.module:callable'"),
        Case("torchrec-table-too-many-rows", "torchrec", _factory("bad_dim"), 2,
             "TorchRec table 't0' (module (root)): num_embeddings"),
        Case("torchrec-bad-constraints", "torchrec", _factory("bad_constraints"), 2, "constraints must be a dict"),
        Case("torchrec-unknown-constraint", "torchrec", _factory("unknown_constraint"), 2,
             "constraints['t9']: the model has no table of that name (tables: t0)"),
        Case("torchrec-bad-name", "torchrec", _factory("good", "fuzzfactory", FACTORY_MODULE, "--name", "../x"), 2,
             "--name: must be a plain file name"),
        Case("torchrec-good", "torchrec", _factory("good"), 0, outputs=("w.yaml",)),
    ]


def all_cases() -> list[Case]:
    return (workload_cases() + plan_cases() + trace_cases() + kineto_cases() + model_cases() + profile_cases()
            + output_cases() + option_cases() + torchrec_cases())

