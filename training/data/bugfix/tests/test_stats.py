import pytest
from numkit.stats import (
    count_above,
    cumulative_sum,
    histogram,
    mean,
    median,
    mode,
    moving_average,
    normalize,
    percentile,
    value_range,
    variance,
    weighted_mean,
)


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5
    assert mean([5]) == 5
    with pytest.raises(ValueError):
        mean([])


def test_median():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5
    assert median([7]) == 7
    assert median([1, 10]) == 5.5


def test_mode():
    assert mode([1, 2, 2, 3]) == 2
    assert mode(["a", "b", "a", "b"]) == "a"
    assert mode([9, 8, 8]) == 8
    assert mode([]) is None


def test_variance():
    assert variance([2, 4, 4, 4, 5, 5, 7, 9]) == 4
    assert variance([3, 3]) == 0


def test_value_range():
    assert value_range([3, 9, 1]) == 8
    assert value_range([5]) == 0
    assert value_range([-2, 2]) == 4


def test_percentile():
    data = [15, 20, 35, 40, 50]
    assert percentile(data, 30) == 20
    assert percentile(data, 40) == 20
    assert percentile(data, 50) == 35
    assert percentile(data, 100) == 50
    assert percentile(data, 0) == 15


def test_normalize():
    assert normalize([0, 5, 10]) == [0.0, 0.5, 1.0]
    assert normalize([2, 2]) == [0.0, 0.0]
    assert normalize([-1, 1]) == [0.0, 1.0]


def test_moving_average():
    assert moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]
    assert moving_average([1, 2, 3], 3) == [2.0]
    assert moving_average([1, 2], 3) == []


def test_cumulative_sum():
    assert cumulative_sum([1, 2, 3]) == [1, 3, 6]
    assert cumulative_sum([]) == []
    assert cumulative_sum([5, -5, 2]) == [5, 0, 2]


def test_weighted_mean():
    assert weighted_mean([1, 3], [1, 1]) == 2
    assert weighted_mean([10, 20], [3, 1]) == 12.5
    with pytest.raises(ValueError):
        weighted_mean([1], [0])


def test_count_above():
    assert count_above([1, 5, 7, 5], 5) == 1
    assert count_above([], 0) == 0
    assert count_above([-1, 0, 1], -1) == 2


def test_histogram():
    assert histogram([1, 2, 11, 19, 20], 10) == {0: 2, 10: 2, 20: 1}
    assert histogram([], 5) == {}
    assert histogram([5, 9, 10], 5) == {5: 2, 10: 1}
