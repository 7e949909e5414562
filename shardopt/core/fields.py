"""Field types shared by the workload's parts: bounded numbers, names and sizes.

Every number a workload holds is checked against these bounds (README, "Errors and exit codes").
"""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import BeforeValidator, Field, Strict

from shardopt.core.units import parse_size

# Bounds every number is checked against (README, "Errors and exit codes"): far beyond any real
# model, and small enough that no arithmetic on them overflows or loses its meaning.
MAX_ROWS = 2**40  # rows of one table
MAX_DIM = 2**16  # embedding_dim
MAX_BATCH = 2**24  # per-rank batch
MAX_WORLD = 2**16  # ranks
MAX_POOLING = 1e5  # mean ids per sample
MAX_FLOAT = 1e12  # any other float (bandwidths, weights, alpha's cap is its own)
MAX_ALPHA = 10.0  # Zipf exponent: beyond it every lookup hits row 0 anyway

PositiveInt = Annotated[int, Strict(), Field(gt=0)]
Rows = Annotated[int, Strict(), Field(gt=0, le=MAX_ROWS)]
Batch = Annotated[int, Strict(), Field(gt=0, le=MAX_BATCH)]
WorldSize = Annotated[int, Strict(), Field(gt=0, le=MAX_WORLD)]
PositiveFloat = Annotated[float, Strict(), Field(gt=0, le=MAX_FLOAT, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Strict(), Field(ge=0, le=MAX_FLOAT, allow_inf_nan=False)]
Pooling = Annotated[float, Strict(), Field(gt=0, le=MAX_POOLING, allow_inf_nan=False)]
Alpha = Annotated[float, Strict(), Field(gt=0, le=MAX_ALPHA, allow_inf_nan=False)]
Fraction = Annotated[float, Strict(), Field(ge=0, le=1, allow_inf_nan=False)]
# Bucket weights are relative; 1e-9..1e9 keeps their normalised probabilities representable.
MIN_WEIGHT, MAX_WEIGHT = 1e-9, 1e9
Weight = Annotated[float, Strict(), Field(ge=MIN_WEIGHT, le=MAX_WEIGHT, allow_inf_nan=False)]
# An integer of bytes, or a string such as "80GB" (the JSON Schema says both).
Size = Annotated[int, BeforeValidator(parse_size, json_schema_input_type=Union[int, str])]
Name = Annotated[str, Strict(), Field(min_length=1, max_length=200)]
Rank = Annotated[int, Strict(), Field(ge=0, lt=MAX_WORLD)]
