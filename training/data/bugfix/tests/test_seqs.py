import pytest
from listkit.seqs import (
    chunk,
    every_nth,
    flatten,
    group_runs,
    interleave,
    last_index,
    pairwise,
    rotate,
    split_at,
    take_while_positive,
    unique,
    zip_longest_fill,
)


def test_chunk():
    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert chunk([1, 2, 3], 3) == [[1, 2, 3]]
    assert chunk([], 4) == []
    with pytest.raises(ValueError):
        chunk([1], 0)


def test_flatten():
    assert flatten([[1, 2], [3], []]) == [1, 2, 3]
    assert flatten([]) == []
    assert flatten([["a"], ["b", "c"]]) == ["a", "b", "c"]


def test_unique():
    assert unique([3, 1, 3, 2, 1]) == [3, 1, 2]
    assert unique([]) == []
    assert unique(["a", "a"]) == ["a"]


def test_rotate():
    assert rotate([1, 2, 3], 1) == [2, 3, 1]
    assert rotate([1, 2, 3], 4) == [2, 3, 1]
    assert rotate([1, 2, 3], -1) == [3, 1, 2]
    assert rotate([1, 2, 3], 0) == [1, 2, 3]
    assert rotate([], 2) == []


def test_interleave():
    assert interleave([1, 2, 3], ["a", "b"]) == [1, "a", 2, "b", 3]
    assert interleave([], [1]) == [1]
    assert interleave([1], []) == [1]


def test_pairwise():
    assert pairwise([1, 2, 3]) == [(1, 2), (2, 3)]
    assert pairwise([1]) == []
    assert pairwise([]) == []


def test_take_while_positive():
    assert take_while_positive([3, 2, 0, 5]) == [3, 2]
    assert take_while_positive([-1, 4]) == []
    assert take_while_positive([1, 1]) == [1, 1]


def test_group_runs():
    assert group_runs([1, 1, 2, 1]) == [[1, 1], [2], [1]]
    assert group_runs([]) == []
    assert group_runs(["x"]) == [["x"]]


def test_last_index():
    assert last_index([1, 2, 1, 3], 1) == 2
    assert last_index([1, 2, 3], 3) == 2
    assert last_index([5, 6], 5) == 0
    assert last_index([], 1) == -1
    assert last_index([2], 9) == -1


def test_split_at():
    assert split_at([1, 0, 2, 3, 0, 4], lambda x: x == 0) == [[1], [2, 3], [4]]
    assert split_at([], bool) == [[]]
    assert split_at([0], lambda x: x == 0) == [[], []]


def test_every_nth():
    assert every_nth([0, 1, 2, 3, 4, 5], 2) == [0, 2, 4]
    assert every_nth([0, 1, 2, 3, 4, 5], 3, start=1) == [1, 4]


def test_zip_longest_fill():
    assert zip_longest_fill([1, 2], ["a"]) == [(1, "a"), (2, None)]
    assert zip_longest_fill([], [1], fill=0) == [(0, 1)]
    assert zip_longest_fill([1], [2]) == [(1, 2)]
