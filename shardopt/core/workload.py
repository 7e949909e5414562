"""The workload: what the user asks to shard (tables, batch, topology), loaded from YAML and checked.

Field names follow TorchRec. The file is declared as frozen pydantic dataclasses so that types,
ranges and unknown keys are checked in one place; checks that span fields (duplicate names, a
table too large for the whole cluster) follow in :func:`semantic_errors`.
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal, Optional, Union

from pydantic import AfterValidator, Field, Strict, StrictBool
from pydantic.dataclasses import dataclass

from shardopt.core.errors import FieldError
from shardopt.core.fields import (  # noqa: F401 (MAX_* are read from here too)
    MAX_ALPHA, MAX_BATCH, MAX_DIM, MAX_FLOAT, MAX_POOLING, MAX_ROWS, MAX_WEIGHT, MAX_WORLD, MIN_WEIGHT, Alpha,
    Batch, Fraction, Name, NonNegativeFloat, Pooling, PositiveFloat, PositiveInt, Rows, Size, Weight, WorldSize,
)
from shardopt.core.hardware import hardware_profiles
from shardopt.core.parallelism import Parallelism, group_world
from shardopt.core.placement import RankSpec, Rule, placement_errors
from shardopt.core.layout import DATA_TYPE_BYTES, shard_bytes
from shardopt.core.validation import STRICT, validate_as
from shardopt.core.units import format_bytes

SHARDING_TYPES = (
    "table_wise",
    "row_wise",
    "column_wise",
    "table_row_wise",
    "table_column_wise",
    "data_parallel",
)
HIST_BINS = 17  # access-count bins (2^(k-1), 2^k] as in the dlrm_datasets locality stats

ShardingType = Literal[
    "table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise", "data_parallel"
]
DataType = Literal["fp32", "fp16", "bf16", "int8"]
Optimizer = Literal["sgd", "rowwise_adagrad", "adagrad", "adam"]


def _multiple_of_4(value: int) -> int:
    if value % 4:
        raise ValueError(f"must be a positive multiple of 4, got {value}")
    return value


def _file_stem(value: str) -> str:
    """A workload name names its default plan file (plans/<name>.json): no path may hide in it."""
    if "/" in value or "\\" in value or value.startswith(".") or "\0" in value or not value.isprintable():
        raise ValueError(
            f"must be a plain file name (no '/', no leading '.', printable), got {value!r}"
        )
    return value


def check_file_stem(value: str, where: str) -> str:
    """``value`` as a workload name, or ShardoptError naming ``where`` (a CLI option)."""
    try:
        if not value or len(value) > 200:
            raise ValueError(f"must be 1 to 200 characters, got {len(value)}")
        return _file_stem(value)
    except ValueError as exc:
        raise FieldError(where, "name", str(exc)).reworded(where) from None


EmbeddingDim = Annotated[int, Strict(), Field(gt=0, le=MAX_DIM), AfterValidator(_multiple_of_4)]
FileStem = Annotated[str, Strict(), Field(min_length=1, max_length=200), AfterValidator(_file_stem)]


@dataclass(frozen=True, config=STRICT)
class UniformAccess:
    """Every row equally likely (ids hashed into the table)."""

    distribution: Literal["uniform"] = "uniform"


@dataclass(frozen=True, config=STRICT)
class ZipfAccess:
    """Row of popularity rank i drawn with probability proportional to i**-alpha."""

    distribution: Literal["zipf"]
    alpha: Alpha = 1.05


def _fractions(values: tuple[float, ...]) -> tuple[float, ...]:
    if len(values) != HIST_BINS:
        raise ValueError(f"must list {HIST_BINS} bin fractions, got {len(values)}")
    total = sum(values)
    if abs(total - 1.0) > 0.05:
        raise ValueError(f"bin fractions must sum to 1 (within 0.05), got sum {total:.3f}")
    return values


HistogramBins = Annotated[tuple[Fraction, ...], AfterValidator(_fractions)]


@dataclass(frozen=True, config=STRICT)
class HistogramAccess:
    """Access counts as in dlrm_datasets' locality stats: bin k holds rows seen (2^(k-1), 2^k] times.

    ``unique_frac[k]`` is the share of touched rows in bin k, ``access_frac[k]`` the share of all
    lookups that hit them; ``rows_touched`` is how many distinct rows one batch touches; ``batches``
    how many batches they were measured on, where they were.
    """

    distribution: Literal["histogram"]
    unique_frac: HistogramBins
    access_frac: HistogramBins
    rows_touched: Optional[Rows] = None
    # Measured from this many batches (shardopt stats --from-batches); None: from a trace or given.
    batches: Optional[Annotated[int, Strict(), Field(gt=0, le=2**40)]] = None


@dataclass(frozen=True, config=STRICT)
class BucketsAccess:
    """Explicit popularity buckets, hottest first: ``rows[i]`` rows each drawn with weight
    ``weights[i]`` per lookup (normalised over the table). shardopt describes the hot and cold
    parts of a FlexShard split this way; a user may too."""

    distribution: Literal["buckets"]
    rows: Annotated[tuple[Weight, ...], Field(min_length=1, max_length=4096)]
    weights: Annotated[tuple[Weight, ...], Field(min_length=1, max_length=4096)]

    def __post_init__(self) -> None:
        if len(self.rows) != len(self.weights):
            raise ValueError(
                f"rows and weights must list the same number of buckets, got {len(self.rows)}"
                f" and {len(self.weights)}"
            )


Access = Annotated[
    Union[UniformAccess, ZipfAccess, HistogramAccess, BucketsAccess], Field(discriminator="distribution")
]


@dataclass(frozen=True, config=STRICT)
class Table:
    """One embedding table and how its features look it up."""

    name: Name
    num_embeddings: Rows
    embedding_dim: EmbeddingDim
    pooling_factor: Pooling = 1.0
    data_type: DataType = "fp32"
    feature_names: Optional[Annotated[tuple[Name, ...], Field(min_length=1)]] = None
    access: Access = UniformAccess()
    # An allow-list, when given, names at least one type: an empty one would allow nothing.
    sharding_types: Optional[Annotated[tuple[ShardingType, ...], Field(min_length=1)]] = None
    # Optional allow-list of TorchRec compute kernels (as ParameterConstraints.compute_kernels).
    compute_kernels: Optional[Annotated[
        tuple[Literal["fused", "fused_uvm", "fused_uvm_caching", "dense"], ...], Field(min_length=1)
    ]] = None
    # False for a sequence table (TorchRec's EmbeddingCollection): every id's row goes back to its
    # sample unpooled, so outputs and traffic grow with lookups, not with samples.
    pooled: StrictBool = True
    # The narrowest column-wise shard, in columns (ParameterConstraints.min_partition).
    min_partition: Optional[Annotated[int, Strict(), Field(gt=0, le=MAX_DIM)]] = None
    # A fixed HBM share for fused_uvm_caching (CacheParams.load_factor); shardopt chooses it otherwise.
    cache_load_factor: Optional[Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False)]] = None

    @property
    def features(self) -> tuple[str, ...]:
        return self.feature_names if self.feature_names else (self.name,)

    @property
    def allowed_sharding_types(self) -> tuple[str, ...]:
        return self.sharding_types if self.sharding_types else SHARDING_TYPES

    @property
    def element_bytes(self) -> int:
        return DATA_TYPE_BYTES[self.data_type]


@dataclass(frozen=True, config=STRICT)
class Topology:
    """The ranks that hold the tables; bandwidths here override the hardware profile's."""

    world_size: WorldSize
    hbm_cap: Size
    local_world_size: Optional[WorldSize] = None
    compute_device: Literal["cuda", "cpu"] = "cuda"
    hardware: Optional[Name] = None
    ddr_cap: Optional[Size] = None
    intra_host_bw: Optional[PositiveFloat] = None  # GB/s per rank
    inter_host_bw: Optional[PositiveFloat] = None  # GB/s per rank
    comm_latency_us: Optional[NonNegativeFloat] = None
    # Ranks unlike the rest (their own HBM, reserved bytes, speed); core/placement.py.
    ranks: Optional[Annotated[tuple[RankSpec, ...], Field(min_length=1, max_length=MAX_WORLD)]] = None

    @cached_property
    def rank_caps(self) -> tuple[int, ...]:
        """Each rank's HBM for shards: its cap less what it holds back."""
        caps = [self.hbm_cap] * self.world_size
        for spec in self.ranks or ():
            for rank in spec.ranks:
                if rank < self.world_size:
                    caps[rank] = (self.hbm_cap if spec.hbm_cap is None else spec.hbm_cap) - spec.reserved
        return tuple(caps)

    @cached_property
    def rank_speeds(self) -> tuple[float, ...]:
        """Each rank's compute speed against the hardware profile (1: as profiled; slower below)."""
        speeds = [1.0] * self.world_size
        for spec in self.ranks or ():
            for rank in spec.ranks:
                if rank < self.world_size:
                    speeds[rank] = spec.speed
        return tuple(speeds)

    @property
    def uniform(self) -> bool:
        """Every rank alike: ranks are then interchangeable."""
        return not self.ranks or (set(self.rank_caps) == {self.hbm_cap} and set(self.rank_speeds) == {1.0})

    @property
    def ranks_per_host(self) -> int:
        return self.local_world_size or self.world_size

    @property
    def num_hosts(self) -> int:
        return self.world_size // self.ranks_per_host

    def host_of(self, rank: int) -> int:
        return rank // self.ranks_per_host


@dataclass(frozen=True, config=STRICT)
class Workload:
    """Everything the planner needs to know about one model's embeddings and its cluster."""

    version: Literal[1]
    name: FileStem
    batch_size: Batch  # per rank, as in TorchRec
    topology: Topology
    tables: Annotated[tuple[Table, ...], Field(min_length=1, max_length=100_000)]
    optimizer: Optimizer = "rowwise_adagrad"
    # Hard constraints on where tables go (pin, colocate, apart); core/placement.py.
    placement: Annotated[tuple[Rule, ...], Field(max_length=100_000)] = ()
    # 2D sparse parallelism (DMPCollection): the plan is for one sharding group; core/parallelism.py.
    parallelism: Optional[Parallelism] = None

    def table(self, name: str) -> Table:
        return self.tables_by_name[name]

    @cached_property
    def tables_by_name(self) -> dict[str, Table]:
        # A search looks tables up by name for every candidate: 5000 tables made a scan the cost.
        return {t.name: t for t in self.tables}

    @cached_property
    def ruled_tables(self) -> frozenset[str]:
        """Tables a placement rule names."""
        return frozenset(name for rule in self.placement for name in rule.tables)


def semantic_errors(workload: Workload) -> list[tuple[str, str]]:
    """Checks that span fields, as (path, reason) pairs; empty when the workload is usable."""
    errors: list[tuple[str, str]] = []
    topo = workload.topology
    if topo.local_world_size is not None and topo.world_size % topo.local_world_size:
        errors.append(
            (
                "topology.local_world_size",
                f"must divide world_size {topo.world_size}, got {topo.local_world_size}",
            )
        )
    profiles = hardware_profiles()
    if topo.hardware is not None and topo.hardware not in profiles:
        errors.append(
            (
                "topology.hardware",
                f"unknown hardware profile {topo.hardware!r}; known: {', '.join(profiles)}",
            )
        )
    starved = [rank for rank, cap in enumerate(topo.rank_caps) if cap <= 0]
    if starved:
        errors.append(("topology.ranks", f"rank {starved[0]} keeps no HBM: its reserved bytes are its whole cap"))
        return errors
    seen_tables: dict[str, int] = {}
    seen_features: dict[str, int] = {}
    cluster = sum(topo.rank_caps)
    if topo.compute_device == "cuda" and topo.ddr_cap:
        cluster += topo.num_hosts * topo.ddr_cap  # UVM tiers keep rows in host memory
    for i, table in enumerate(workload.tables):
        if table.name in seen_tables:
            errors.append(
                (
                    f"tables[{i}].name",
                    f"duplicate table name {table.name!r} (also tables[{seen_tables[table.name]}])",
                )
            )
        seen_tables.setdefault(table.name, i)
        for feature in table.features:
            if feature in seen_features and seen_features[feature] != i:
                errors.append(
                    (
                        f"tables[{i}].feature_names",
                        f"feature {feature!r} is also read by tables[{seen_features[feature]}]",
                    )
                )
            seen_features.setdefault(feature, i)
        access = table.access
        if isinstance(access, HistogramAccess) and access.rows_touched is not None:
            if access.rows_touched > table.num_embeddings:
                errors.append(
                    (
                        f"tables[{i}].access.rows_touched",
                        f"must be at most num_embeddings {table.num_embeddings},"
                        f" got {access.rows_touched}",
                    )
                )
        need = shard_bytes(workload.optimizer, table, table.num_embeddings, table.embedding_dim)
        if need > cluster:
            errors.append(
                (
                    f"tables[{i}]",
                    f"table {table.name!r} needs {format_bytes(need)} (weights + optimizer state),"
                    f" more than the whole cluster's {format_bytes(cluster)}"
                    f" ({topo.world_size} ranks x hbm_cap {format_bytes(topo.hbm_cap)}"
                    + (", less reserved" if not topo.uniform else "")
                    + (f", and ddr_cap {format_bytes(topo.ddr_cap)} per host" if topo.compute_device == "cuda" and topo.ddr_cap else "")
                    + ")",
                )
            )
    errors.extend(placement_errors((), topo.ranks, topo.world_size, topo.num_hosts, seen_tables))
    group = group_world(topo, workload.parallelism, workload.placement, errors)
    if group is not None:
        errors.extend(placement_errors(workload.placement, None, group[0], group[1], seen_tables))
    return errors


def workload_from_dict(data: object, source: str = "<workload>") -> Workload:
    """Validate plain data (as parsed from YAML) into a Workload; ShardoptError on the first fault."""
    workload = validate_as(Workload, data, source)
    errors = semantic_errors(workload)
    if errors:
        path, reason = errors[0]
        raise FieldError(source, path, reason)
    return workload


def read_workload(path: str | Path) -> tuple[Workload, str]:
    """Load a workload file; return it with the sha256 of its bytes (plans record the hash)."""
    from shardopt.core.loaders import load_yaml

    data, raw = load_yaml(path, "workload file")
    return workload_from_dict(data, str(path)), hashlib.sha256(raw).hexdigest()


def workload_to_dict(workload: Workload) -> dict:
    """Plain data that reads back into the same workload (defaults left out)."""
    import dataclasses

    def strip(obj: object) -> object:
        if dataclasses.is_dataclass(obj):
            out = {}
            for f in dataclasses.fields(obj):
                value = getattr(obj, f.name)
                if value is None or (f.default is not dataclasses.MISSING and value == f.default):
                    if f.name != "distribution":
                        continue
                out[f.name] = strip(value)
            return out
        if isinstance(obj, tuple):
            return [strip(v) for v in obj]
        return obj

    return strip(workload)  # type: ignore[return-value]


def workload_yaml(data: dict, header: str = "") -> str:
    """YAML text of a workload's plain data; short lists (histograms) stay on one line."""
    from shardopt.core.loaders import dump_yaml

    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + dump_yaml(data, sort_keys=False, default_flow_style=None, width=100)
