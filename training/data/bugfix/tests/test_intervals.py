from spankit.intervals import (
    clamp_span,
    contains,
    free_slots,
    gaps,
    intersection,
    length,
    max_overlap,
    merge,
    overlaps,
    shift,
    split_span,
    total_covered,
)


def test_length():
    assert length((2, 7)) == 5
    assert length((3, 3)) == 0


def test_contains():
    assert contains((2, 5), 2)
    assert contains((2, 5), 4)
    assert not contains((2, 5), 5)
    assert not contains((2, 5), 1)


def test_overlaps():
    assert overlaps((0, 5), (4, 8))
    assert not overlaps((0, 5), (5, 8))
    assert overlaps((0, 10), (2, 3))
    assert not overlaps((6, 8), (0, 5))


def test_intersection():
    assert intersection((0, 5), (3, 8)) == (3, 5)
    assert intersection((0, 5), (5, 8)) is None
    assert intersection((2, 3), (0, 10)) == (2, 3)


def test_merge():
    assert merge([(5, 7), (1, 3), (2, 4)]) == [(1, 4), (5, 7)]
    assert merge([(1, 2), (2, 3)]) == [(1, 3)]
    assert merge([(1, 10), (2, 3)]) == [(1, 10)]
    assert merge([]) == []


def test_total_covered():
    assert total_covered([(1, 4), (2, 6), (8, 9)]) == 6
    assert total_covered([]) == 0


def test_gaps():
    assert gaps([(2, 4), (6, 7)], 0, 10) == [(0, 2), (4, 6), (7, 10)]
    assert gaps([(0, 10)], 0, 10) == []
    assert gaps([], 3, 5) == [(3, 5)]
    assert gaps([(5, 20)], 0, 10) == [(0, 5)]


def test_shift():
    assert shift((1, 4), 3) == (4, 7)
    assert shift((1, 4), -1) == (0, 3)


def test_clamp_span():
    assert clamp_span((0, 10), 2, 5) == (2, 5)
    assert clamp_span((3, 4), 0, 10) == (3, 4)
    assert clamp_span((12, 15), 0, 10) == (10, 10)
    assert clamp_span((-5, -1), 0, 10) == (0, 0)


def test_split_span():
    assert split_span((0, 10), 4) == ((0, 4), (4, 10))
    assert split_span((0, 10), 0) == ((0, 10), None)
    assert split_span((0, 10), 10) == ((0, 10), None)


def test_max_overlap():
    assert max_overlap([(0, 5), (1, 3), (2, 8)]) == 3
    assert max_overlap([(0, 2), (2, 4)]) == 1
    assert max_overlap([]) == 0


def test_free_slots():
    busy = [(9, 10), (11, 12), (12, 13)]
    assert free_slots(busy, 8, 17, 2) == [(13, 17)]
    assert free_slots(busy, 8, 17, 1) == [(8, 9), (10, 11), (13, 17)]
