from geokit.shapes import (
    bounding_box,
    distance_sq,
    in_rect,
    is_right_triangle,
    manhattan,
    midpoint,
    perimeter,
    polygon_area,
    quadrant,
    rect_area,
    rects_overlap,
    triangle_kind,
)


def test_distance_sq():
    assert distance_sq((0, 0), (3, 4)) == 25
    assert distance_sq((1, 1), (1, 1)) == 0
    assert distance_sq((-1, 2), (2, -2)) == 25


def test_manhattan():
    assert manhattan((0, 0), (3, 4)) == 7
    assert manhattan((2, -1), (-1, 3)) == 7
    assert manhattan((5, 5), (5, 5)) == 0


def test_midpoint():
    assert midpoint((0, 0), (4, 2)) == (2, 1)
    assert midpoint((-2, 3), (2, 5)) == (0, 4)
    assert midpoint((1, 1), (2, 2)) == (1.5, 1.5)


def test_rect_area():
    assert rect_area((0, 0, 3, 2)) == 6
    assert rect_area((1, 1, 1, 5)) == 0
    assert rect_area((-2, -1, 2, 1)) == 8


def test_in_rect():
    rect = (0, 0, 4, 3)
    assert in_rect((2, 1), rect)
    assert in_rect((0, 3), rect)
    assert not in_rect((5, 1), rect)
    assert not in_rect((2, -1), rect)


def test_rects_overlap():
    assert rects_overlap((0, 0, 2, 2), (1, 1, 3, 3))
    assert not rects_overlap((0, 0, 1, 1), (1, 0, 2, 1))
    assert not rects_overlap((0, 0, 1, 1), (0, 2, 1, 3))
    assert rects_overlap((0, 0, 10, 10), (2, 2, 3, 3))


def test_bounding_box():
    assert bounding_box([(1, 5), (3, -2), (-1, 0)]) == (-1, -2, 3, 5)
    assert bounding_box([(2, 2)]) == (2, 2, 2, 2)


def test_polygon_area():
    assert polygon_area([(0, 0), (4, 0), (4, 3), (0, 3)]) == 12
    assert polygon_area([(0, 0), (0, 3), (4, 3), (4, 0)]) == 12
    assert polygon_area([(0, 0), (4, 0), (0, 3)]) == 6


def test_triangle_kind():
    assert triangle_kind(2, 2, 2) == "equilateral"
    assert triangle_kind(2, 2, 3) == "isosceles"
    assert triangle_kind(3, 2, 3) == "isosceles"
    assert triangle_kind(3, 4, 5) == "scalene"
    assert triangle_kind(1, 2, 3) == "invalid"
    assert triangle_kind(0, 1, 1) == "invalid"


def test_is_right_triangle():
    assert is_right_triangle(3, 4, 5)
    assert is_right_triangle(13, 5, 12)
    assert not is_right_triangle(2, 3, 4)


def test_perimeter():
    assert perimeter([(0, 0), (3, 0), (3, 2), (0, 2)]) == 10
    assert perimeter([(0, 0), (1, 1)]) == 4


def test_quadrant():
    assert quadrant((1, 2)) == 1
    assert quadrant((-1, 2)) == 2
    assert quadrant((-1, -2)) == 3
    assert quadrant((1, -2)) == 4
    assert quadrant((0, 5)) == 0
    assert quadrant((3, 0)) == 0
