"""Plane geometry on (x, y) tuples; rectangles are (x0, y0, x1, y1) with x0 <= x1, y0 <= y1."""


def distance_sq(p, q):
    """Squared Euclidean distance."""
    dx = p[0] - q[0]
    dy = p[1] - q[1]
    return dx * dx + dy * dy


def manhattan(p, q):
    """|dx| + |dy|."""
    return abs(p[0] - q[0]) + abs(p[1] - q[1])


def midpoint(p, q):
    """The point halfway between p and q."""
    return ((p[0] + q[0]) / 2, (p[1] + q[1]) / 2)


def rect_area(rect):
    """Width times height."""
    x0, y0, x1, y1 = rect
    return (x1 - x0) * (y1 - y0)


def in_rect(point, rect):
    """True when the point is inside or on the edge."""
    x, y = point
    x0, y0, x1, y1 = rect
    return x0 <= x <= x1 and y0 <= y <= y1


def rects_overlap(a, b):
    """True when the rectangles share some area (touching edges do not count)."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def bounding_box(points):
    """The smallest rectangle holding every point."""
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    return (min(xs), min(ys), max(xs), max(ys))


def polygon_area(points):
    """Area of a simple polygon (shoelace formula), always >= 0."""
    total = 0
    n = len(points)
    for i in range(n):
        x0, y0 = points[i]
        x1, y1 = points[(i + 1) % n]
        total += x0 * y1 - x1 * y0
    return abs(total) / 2


def triangle_kind(a, b, c):
    """'equilateral', 'isosceles', 'scalene' or 'invalid' for side lengths."""
    x, y, z = sorted((a, b, c))
    if x <= 0 or x + y <= z:
        return "invalid"
    if x == z:
        return "equilateral"
    if x == y or y == z:
        return "isosceles"
    return "scalene"


def is_right_triangle(a, b, c):
    """True when the integer sides satisfy Pythagoras."""
    x, y, z = sorted((a, b, c))
    return x * x + y * y == z * z


def perimeter(points):
    """Perimeter of a closed polygon with integer-friendly Manhattan edges."""
    total = 0
    for i in range(len(points)):
        total += manhattan(points[i], points[(i + 1) % len(points)])
    return total


def quadrant(point):
    """1-4 counter-clockwise from (+, +); 0 on an axis."""
    x, y = point
    if x == 0 or y == 0:
        return 0
    if x > 0:
        return 1 if y > 0 else 4
    return 2 if y > 0 else 3
