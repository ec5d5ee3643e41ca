"""parse_size / format_size: every accepted spelling, vLLM's suffix rule, and clear refusals."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvplan.units import (
    bytes_to_gib,
    format_budget,
    format_policy_size,
    format_size,
    parse_size,
    parse_size_list,
)
from tests.conftest import GiB, KiB, MiB


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12GiB", 12 * GiB),
        ("12 GiB", 12 * GiB),
        # 0.9 × 2^30 = 966,367,641.6 → nearest byte 966,367,642
        ("0.9GiB", 966_367_642),
        ("512MiB", 512 * MiB),
        ("256KiB", 256 * KiB),
        ("12GB", 12 * 10**9),  # SI: 10^9
        ("4096", 4096),
        ("4096B", 4096),
        # vLLM's human_readable_int: upper case binary, lower case decimal
        ("12G", 12 * GiB),
        ("12g", 12 * 10**9),
        ("8.5g", 8_500_000_000),
        ("512M", 512 * MiB),
        ("2k", 2000),
        # 40.75 GiB = 40 × 2^30 + 3/4 × 2^30 = 42,949,672,960 + 805,306,368
        ("40.75GiB", 43_754_979_328),
        ("-150MiB", -150 * MiB),
    ],
)
def test_parse_size_accepts(text, expected):
    assert parse_size(text) == expected


def test_parse_size_passes_ints_through():
    assert parse_size(12 * GiB) == 12 * GiB


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("abc", "'abc'"),
        ("12 parsecs", "unknown unit"),
        ("8.5G", "decimals are not allowed"),  # vLLM refuses decimals with a binary letter
        ("1.5", "whole number"),
        ("", "not a size"),
        ("12GiB extra", "not a size"),
    ],
)
def test_parse_size_refuses_with_the_bad_text(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_size(text)


def test_parse_size_refuses_bool():
    with pytest.raises(ValueError):
        parse_size(True)


@pytest.mark.parametrize(
    ("num_bytes", "expected"),
    [
        (12 * GiB, "12 GiB"),
        (19_219_978_650, "17.9 GiB"),  # 18.8 GiB − 0.9 GiB in bytes
        (256 * KiB, "256 KiB"),
        (1536 * MiB, "1.5 GiB"),
        (0, "0 B"),
        (-150 * MiB, "-150 MiB"),
    ],
)
def test_format_size(num_bytes, expected):
    assert format_size(num_bytes) == expected


def test_bytes_to_gib():
    assert bytes_to_gib(49 * GiB // 2) == 24.5


def test_parse_size_list_names_the_bad_entry():
    assert parse_size_list("1GiB,2GiB") == [GiB, 2 * GiB]
    with pytest.raises(ValueError, match="entry 1 of '12GiB,abc'"):
        parse_size_list("12GiB,abc")
    with pytest.raises(ValueError, match="empty"):
        parse_size_list("")
    with pytest.raises(ValueError, match="position 1"):
        parse_size_list("12GiB,,3GiB")


@given(st.integers(min_value=0, max_value=1 << 50))
def test_format_then_parse_is_within_rounding(num_bytes):
    """format_size keeps 2 decimals of its unit, so a round trip is within half a hundredth."""
    text = format_size(num_bytes)
    unit = {"B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": 1 << 40}[text.split()[1]]
    assert abs(parse_size(text) - num_bytes) <= unit // 200 + 1


@pytest.mark.parametrize("text", ["1" * 400, "8388608TiB", "-8388608TiB", 2**63])
def test_sizes_beyond_8_eib_are_refused(text):
    # the ledger holds bytes as 64-bit integers: 2**63 − 1 B (8 EiB − 1 B) is the largest size;
    # 8,388,608 TiB = 2**23 × 2**40 B = 2**63 B is one byte beyond it
    with pytest.raises(ValueError, match="beyond 8 EiB"):
        parse_size(text)
    assert parse_size(2**63 - 1) == 2**63 - 1


# issue 27: a budget shown as text is never above its bytes (floor at the shown precision)
@pytest.mark.parametrize(
    ("num_bytes", "expected"),
    [
        # 10,735,351,296 / 2^30 = 9.99804… GiB: "10 GiB" would be 2 MiB too much; floored to 9.99
        (10_735_351_296, "9.99 GiB"),
        # 9,830 blocks of 1,310,720 B = 12,884,377,600 B = 11.99951… GiB
        (12_884_377_600, "11.99 GiB"),
        (12 * GiB, "12 GiB"),
        (30_332_682_240, "28.24 GiB"),  # 28.2490… GiB (notebook 04's lower value that fits)
        (1023 * MiB + 1023 * KiB, "1023.99 MiB"),  # 1023.999 MiB stays in MiB, floored
        (512, "512 B"),
    ],
)
def test_format_budget_floors(num_bytes, expected):
    assert format_budget(num_bytes) == expected


@given(st.integers(min_value=0, max_value=2**50))
def test_format_budget_is_never_above_the_bytes(num_bytes):
    assert parse_size(format_budget(num_bytes).replace(" ", "")) <= num_bytes


# issue 27: a policy size reads as it was typed
@pytest.mark.parametrize(
    "text", ["0.9GiB", "1GiB", "0.5GiB", "1.5GiB", "512MiB", "1.25GiB", "100MiB", "12GiB"]
)
def test_format_policy_size_reads_back_as_typed(text):
    shown = format_policy_size(parse_size(text))
    assert shown.replace(" ", "") == text.replace("0.5GiB", "512MiB")  # 0.5 GiB is 512 MiB exactly
    assert parse_size(shown) == parse_size(text)


@given(st.integers(min_value=0, max_value=2**45))
def test_format_policy_size_is_exact_or_format_size(num_bytes):
    shown = format_policy_size(num_bytes)
    assert parse_size(shown.replace(" ", "")) == num_bytes or shown == format_size(num_bytes)
