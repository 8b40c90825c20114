"""The preflight's median of clock offsets: statistics.median's answer, odd and even."""

from planner.phases.validate import _median


def test_the_median_of_an_odd_count_is_the_middle_offset() -> None:
    assert _median([300.0, -1.0, 0.5]) == 0.5


def test_the_median_of_an_even_count_is_the_mean_of_the_middle_two() -> None:
    assert _median([4.0, -2.0, 1.0, 0.0]) == 0.5
    assert _median([7.0, 3.0]) == 5.0
