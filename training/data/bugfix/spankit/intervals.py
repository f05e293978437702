"""Half-open integer intervals (start, end) with start <= end."""


def length(span):
    """end - start."""
    return span[1] - span[0]


def contains(span, x):
    """True when start <= x < end."""
    return span[0] <= x < span[1]


def overlaps(a, b):
    """True when the intervals share at least one point."""
    return a[0] < b[1] and b[0] < a[1]


def intersection(a, b):
    """The common part, or None."""
    start, end = max(a[0], b[0]), min(a[1], b[1])
    if start >= end:
        return None
    return (start, end)


def merge(spans):
    """Sorted, with overlapping or touching intervals joined."""
    out = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def total_covered(spans):
    """How many points the union of the intervals covers."""
    return sum(length(s) for s in merge(spans))


def gaps(spans, lo, hi):
    """The parts of [lo, hi) that no interval covers."""
    out = []
    cursor = lo
    for start, end in merge(spans):
        if start > cursor:
            out.append((cursor, min(start, hi)))
        cursor = max(cursor, end)
        if cursor >= hi:
            break
    if cursor < hi:
        out.append((cursor, hi))
    return out


def shift(span, delta):
    """The interval moved by delta."""
    return (span[0] + delta, span[1] + delta)


def clamp_span(span, lo, hi):
    """The interval cut to [lo, hi); an empty result is (lo, lo) or (hi, hi)."""
    start = min(max(span[0], lo), hi)
    end = max(min(span[1], hi), start)
    return (start, end)


def split_span(span, at):
    """Two pieces cut at `at`; a cut outside the interval gives (span, None)."""
    start, end = span
    if not start < at < end:
        return (span, None)
    return ((start, at), (at, end))


def max_overlap(spans):
    """The largest number of intervals covering one point."""
    events = []
    for start, end in spans:
        events.append((start, 1))
        events.append((end, -1))
    best = current = 0
    for _, delta in sorted(events):
        current += delta
        best = max(best, current)
    return best


def free_slots(busy, day_start, day_end, minimum):
    """Gaps of at least `minimum` in [day_start, day_end)."""
    return [g for g in gaps(busy, day_start, day_end) if length(g) >= minimum]
