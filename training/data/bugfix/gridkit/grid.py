"""2-D grids as lists of rows."""


def make_grid(rows, cols, fill=0):
    """A rows x cols grid of `fill` (rows are distinct lists)."""
    return [[fill] * cols for _ in range(rows)]


def in_bounds(grid, r, c):
    """True when (r, c) is a cell of the grid."""
    return 0 <= r < len(grid) and 0 <= c < len(grid[0])


def neighbors4(grid, r, c):
    """In-bounds cells up, down, left, right of (r, c), in that order."""
    out = []
    for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        nr, nc = r + dr, c + dc
        if in_bounds(grid, nr, nc):
            out.append((nr, nc))
    return out


def transpose(grid):
    """Rows become columns."""
    if not grid:
        return []
    return [[grid[r][c] for r in range(len(grid))] for c in range(len(grid[0]))]


def rotate_clockwise(grid):
    """The grid turned 90 degrees clockwise."""
    return [list(row) for row in zip(*grid[::-1], strict=True)]


def row_sums(grid):
    """The sum of each row."""
    return [sum(row) for row in grid]


def col_sums(grid):
    """The sum of each column."""
    if not grid:
        return []
    sums = [0] * len(grid[0])
    for row in grid:
        for c, value in enumerate(row):
            sums[c] += value
    return sums


def diagonal(grid):
    """grid[0][0], grid[1][1], ... for the square part of the grid."""
    n = min(len(grid), len(grid[0])) if grid else 0
    return [grid[i][i] for i in range(n)]


def count_value(grid, value):
    """How many cells hold `value`."""
    return sum(row.count(value) for row in grid)


def spiral(grid):
    """Cells in clockwise spiral order from the top-left."""
    out = []
    top, bottom = 0, len(grid) - 1
    left, right = 0, (len(grid[0]) - 1) if grid else -1
    while top <= bottom and left <= right:
        for c in range(left, right + 1):
            out.append(grid[top][c])
        for r in range(top + 1, bottom + 1):
            out.append(grid[r][right])
        if top < bottom:
            for c in range(right - 1, left - 1, -1):
                out.append(grid[bottom][c])
        if left < right:
            for r in range(bottom - 1, top, -1):
                out.append(grid[r][left])
        top, bottom, left, right = top + 1, bottom - 1, left + 1, right - 1
    return out


def live_neighbors(grid, r, c):
    """Count of the 8 surrounding cells that are 1."""
    total = 0
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            if (dr or dc) and in_bounds(grid, r + dr, c + dc):
                total += grid[r + dr][c + dc]
    return total


def life_step(grid):
    """One step of Conway's Game of Life (cells outside the grid are dead)."""
    out = make_grid(len(grid), len(grid[0]))
    for r in range(len(grid)):
        for c in range(len(grid[0])):
            n = live_neighbors(grid, r, c)
            if n == 3 or (n == 2 and grid[r][c] == 1):
                out[r][c] = 1
    return out


def find_cell(grid, value):
    """(row, col) of the first cell holding value, scanning rows; None if absent."""
    for r, row in enumerate(grid):
        for c, cell in enumerate(row):
            if cell == value:
                return (r, c)
    return None
