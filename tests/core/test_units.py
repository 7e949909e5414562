import pytest

from shardopt.core.units import format_bytes, parse_size


@pytest.mark.parametrize(
    "text, expected",
    [
        (1024, 1024),
        ("80GB", 80 * 10**9),
        ("512MiB", 512 * 2**20),
        ("1.5 TiB", int(1.5 * 2**40)),
        ("7", 7),
        ("2kb", 2000),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", [0, -5, "80GX", "GB", "-1GB", True, 1.5, None, "0MB"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(3 * 2**30) == "3 GiB"
    assert format_bytes(1536 * 2**10) == "1.5 MiB"
