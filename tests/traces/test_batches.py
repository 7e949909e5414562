"""Statistics measured from a dataloader's KeyedJaggedTensors: pooling, the access curve, the
distinct rows, in bounded memory; bad batches refused in one line."""

from __future__ import annotations

import pytest

pytest.importorskip("torchrec")

import torch  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor  # noqa: E402

from examples.synthetic_batches import true_hot_share, zipf_loader  # noqa: E402
from shardopt.core.errors import ShardoptError  # noqa: E402
from shardopt.traces.batches import SHARES, measure_batches  # noqa: E402

FEATURES = {"a": (20_000, 0.8, 1.0), "b": (200_000, 1.05, 5.0), "c": (5_000, 1.2, 30.0)}
TABLES = {name: (f"t_{name}", rows) for name, (rows, _, _) in FEATURES.items()}


@pytest.mark.parametrize("max_distinct", [1 << 21, 3_000])
def test_pooling_and_the_hottest_shares_match_the_known_distribution(max_distinct):
    """Within 2% on pooling and 3 points on the hottest 1%, exactly counted or pruned to the
    heaviest ``max_distinct`` ids (the distinct count then estimated within 5%)."""
    exact = measure_batches(zipf_loader(FEATURES, 60, 2048), TABLES)
    stats = measure_batches(zipf_loader(FEATURES, 60, 2048), TABLES, max_distinct=max_distinct)
    for name, (rows, alpha, pooling) in FEATURES.items():
        s = stats[f"t_{name}"]
        assert s.batches == 60 and s.bags == 60 * 2048
        assert s.pooling_factor == pytest.approx(pooling, rel=0.02)
        assert s.pooling_sd == pytest.approx(pooling ** 0.5, rel=0.05)  # Poisson bags
        for share, measured in zip(SHARES, s.hot_shares):
            if share == 0.01:
                assert measured == pytest.approx(true_hot_share(rows, alpha, share), abs=0.03), name
        assert s.distinct == pytest.approx(exact[f"t_{name}"].distinct, rel=0.05)
        assert sum(s.unique_frac) == pytest.approx(1, abs=1e-4) and sum(s.access_frac) == pytest.approx(1, abs=1e-4)
    assert not stats["t_b"].exact or max_distinct > 200_000


def test_a_table_far_larger_than_its_lookups_takes_the_heads_power_law():
    """2M rows read ~80K times (0.04 lookups a row): counting alone calls the 1% of rows seen
    most the home of over 60% of lookups; the head's fitted exponent puts it within 5 points."""
    sparse = {"s": (2_000_000, 0.9, 1.0)}
    s = measure_batches(zipf_loader(sparse, 40, 2048), {"s": ("t", 2_000_000)})["t"]
    assert s.lookups < 0.05 * 2_000_000 and s.shares_from == "fitted"
    for share, measured in zip(SHARES, s.hot_shares):
        assert measured == pytest.approx(true_hot_share(2_000_000, 0.9, share), abs=0.05), share


def test_too_few_well_read_rows_is_under_sampled_and_never_more_skewed_than_counted():
    """Ten lookups, each of another row: no head to fit, the shares are those of an even spread
    (each fraction of the rows takes that fraction of the lookups), and say so."""
    s = measure_batches([_kjt(list(range(0, 1000, 100)), [1] * 10)], {"a": ("t", 1000)})["t"]
    assert s.shares_from == "under-sampled"
    assert s.hot_shares == pytest.approx(SHARES, abs=1e-9)


def test_features_sharing_a_table_add_up_per_sample():
    two = {"x": ("t", 1000), "y": ("t", 1000)}
    batch = KeyedJaggedTensor.from_lengths_sync(keys=["x", "y"], values=torch.tensor([1, 2, 3, 1, 1]),
                                                lengths=torch.tensor([2, 1, 1, 1]))
    s = measure_batches([batch], two)["t"]
    assert s.bags == 2 and s.pooling_factor == 2.5 and s.lookups == 5


def _kjt(values, lengths, keys=("a",)):
    return KeyedJaggedTensor.from_lengths_sync(keys=list(keys), values=torch.tensor(values),
                                               lengths=torch.tensor(lengths))


@pytest.mark.parametrize("batches,says", [
    ([_kjt([1, 99_999], [1, 1])], "batch 0: feature 'a': 1 ids outside table 't_a''s 20000 rows"),
    ([_kjt([1, -1], [1, 1])], "feature 'a': 1 ids outside"),
    ([_kjt([1], [1], keys=("zz",))], "batch 0: feature 'zz' is in no table of the model"),
    ([], "yielded no batch"),
])
def test_bad_batches_are_one_line_naming_the_feature(batches, says):
    with pytest.raises(ShardoptError, match=says.replace("(", r"\(").replace("'", "'")):
        measure_batches(batches, TABLES, source="loader")
