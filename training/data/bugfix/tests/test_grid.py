from gridkit.grid import (
    col_sums,
    count_value,
    diagonal,
    find_cell,
    in_bounds,
    life_step,
    live_neighbors,
    make_grid,
    neighbors4,
    rotate_clockwise,
    row_sums,
    spiral,
    transpose,
)

G = [[1, 2, 3], [4, 5, 6]]


def test_make_grid():
    grid = make_grid(2, 3, fill=7)
    assert grid == [[7, 7, 7], [7, 7, 7]]
    grid[0][0] = 1
    assert grid[1][0] == 7
    assert make_grid(1, 2) == [[0, 0]]


def test_in_bounds():
    assert in_bounds(G, 0, 0)
    assert in_bounds(G, 1, 2)
    assert not in_bounds(G, 2, 0)
    assert not in_bounds(G, 0, 3)
    assert not in_bounds(G, -1, 0)
    assert not in_bounds(G, 0, -1)


def test_neighbors4():
    assert neighbors4(G, 0, 0) == [(1, 0), (0, 1)]
    assert neighbors4(G, 1, 1) == [(0, 1), (1, 0), (1, 2)]
    assert neighbors4(G, 0, 2) == [(1, 2), (0, 1)]


def test_transpose():
    assert transpose(G) == [[1, 4], [2, 5], [3, 6]]
    assert transpose([]) == []
    assert transpose([[1]]) == [[1]]


def test_rotate_clockwise():
    assert rotate_clockwise(G) == [[4, 1], [5, 2], [6, 3]]
    assert rotate_clockwise([[1, 2], [3, 4]]) == [[3, 1], [4, 2]]


def test_row_sums():
    assert row_sums(G) == [6, 15]
    assert row_sums([]) == []


def test_col_sums():
    assert col_sums(G) == [5, 7, 9]
    assert col_sums([]) == []
    assert col_sums([[1, -1]]) == [1, -1]


def test_diagonal():
    assert diagonal(G) == [1, 5]
    assert diagonal([[1, 2], [3, 4], [5, 6]]) == [1, 4]
    assert diagonal([]) == []


def test_count_value():
    assert count_value([[1, 0], [1, 1]], 1) == 3
    assert count_value([[1, 0], [1, 1]], 0) == 1
    assert count_value([[2]], 5) == 0


def test_spiral():
    assert spiral([[1, 2, 3], [4, 5, 6], [7, 8, 9]]) == [1, 2, 3, 6, 9, 8, 7, 4, 5]
    assert spiral(G) == [1, 2, 3, 6, 5, 4]
    assert spiral([[1], [2], [3]]) == [1, 2, 3]
    assert spiral([[1, 2, 3]]) == [1, 2, 3]
    assert spiral([]) == []


def test_live_neighbors():
    grid = [[1, 1, 0], [0, 1, 0], [0, 0, 1]]
    assert live_neighbors(grid, 1, 1) == 3
    assert live_neighbors(grid, 0, 0) == 2
    assert live_neighbors(grid, 2, 2) == 1
    assert live_neighbors(grid, 2, 0) == 1


def test_life_step():
    blinker = [[0, 0, 0], [1, 1, 1], [0, 0, 0]]
    assert life_step(blinker) == [[0, 1, 0], [0, 1, 0], [0, 1, 0]]
    block = [[1, 1], [1, 1]]
    assert life_step(block) == block
    assert life_step([[1, 0], [0, 0]]) == [[0, 0], [0, 0]]


def test_find_cell():
    assert find_cell(G, 5) == (1, 1)
    assert find_cell([[0, 1], [1, 0]], 1) == (0, 1)
    assert find_cell(G, 9) is None
