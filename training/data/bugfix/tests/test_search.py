import pytest
from listkit.search import (
    argmax,
    binary_search,
    count_less,
    find_peak,
    insertion_sort,
    is_sorted,
    kth_smallest,
    lower_bound,
    max_subarray,
    merge_sorted,
    two_sum,
)


def test_binary_search():
    data = [1, 3, 5, 7, 9]
    assert binary_search(data, 7) == 3
    assert binary_search(data, 1) == 0
    assert binary_search(data, 9) == 4
    assert binary_search(data, 4) == -1
    assert binary_search([], 1) == -1


def test_lower_bound():
    data = [1, 2, 2, 4]
    assert lower_bound(data, 2) == 1
    assert lower_bound(data, 3) == 3
    assert lower_bound(data, 0) == 0
    assert lower_bound(data, 5) == 4


def test_insertion_sort():
    assert insertion_sort([3, 1, 2]) == [1, 2, 3]
    assert insertion_sort([]) == []
    assert insertion_sort([5, 5, 1]) == [1, 5, 5]
    assert insertion_sort([2, 1]) == [1, 2]


def test_is_sorted():
    assert is_sorted([1, 2, 2, 3])
    assert is_sorted([])
    assert not is_sorted([2, 1])
    assert not is_sorted([1, 3, 2])


def test_merge_sorted():
    assert merge_sorted([1, 4, 6], [2, 3, 7]) == [1, 2, 3, 4, 6, 7]
    assert merge_sorted([], [1]) == [1]
    assert merge_sorted([1, 2], []) == [1, 2]
    assert merge_sorted([2], [1]) == [1, 2]


def test_max_subarray():
    assert max_subarray([-2, 1, -3, 4, -1, 2, 1, -5, 4]) == 6
    assert max_subarray([-3, -1, -2]) == -1
    assert max_subarray([5]) == 5


def test_two_sum():
    assert two_sum([2, 7, 11, 15], 9) == (0, 1)
    assert two_sum([3, 2, 4], 6) == (1, 2)
    assert two_sum([3, 3], 6) == (0, 1)
    assert two_sum([1, 2], 7) is None


def test_find_peak():
    assert find_peak([1, 3, 2]) == 1
    assert find_peak([5, 1, 2]) == 0
    assert find_peak([1, 2, 3]) == 2
    assert find_peak([2, 2]) == -1


def test_kth_smallest():
    assert kth_smallest([7, 1, 5], 1) == 1
    assert kth_smallest([7, 1, 5], 3) == 7
    with pytest.raises(IndexError):
        kth_smallest([1], 2)
    with pytest.raises(IndexError):
        kth_smallest([1], 0)


def test_argmax():
    assert argmax([1, 9, 3]) == 1
    assert argmax([4, 4, 1]) == 0
    assert argmax([1, 2, 5]) == 2


def test_count_less():
    assert count_less([1, 2, 2, 5], 2) == 1
    assert count_less([1, 2, 2, 5], 6) == 4
