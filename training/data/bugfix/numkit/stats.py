"""Descriptive statistics over lists of numbers."""


def mean(xs):
    """Arithmetic mean; ValueError for an empty list."""
    if not xs:
        raise ValueError("mean of nothing")
    return sum(xs) / len(xs)


def median(xs):
    """The middle value (the mean of the two middle values for an even count)."""
    s = sorted(xs)
    n = len(s)
    mid = n // 2
    if n % 2 == 1:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2


def mode(xs):
    """The most common value; ties go to the value seen first."""
    counts = {}
    for x in xs:
        counts[x] = counts.get(x, 0) + 1
    best = None
    for x, c in counts.items():
        if best is None or c > counts[best]:
            best = x
    return best


def variance(xs):
    """Population variance."""
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / len(xs)


def value_range(xs):
    """max - min (0 for a single value)."""
    return max(xs) - min(xs)


def percentile(xs, p):
    """The p-th percentile (0..100) by nearest rank."""
    s = sorted(xs)
    if p <= 0:
        return s[0]
    rank = -(-p * len(s) // 100)
    return s[rank - 1]


def normalize(xs):
    """Scales values to [0, 1]; all-equal values become 0.0."""
    lo, hi = min(xs), max(xs)
    if hi == lo:
        return [0.0 for _ in xs]
    return [(x - lo) / (hi - lo) for x in xs]


def moving_average(xs, window):
    """Means of each run of `window` consecutive values."""
    out = []
    for i in range(len(xs) - window + 1):
        out.append(sum(xs[i:i + window]) / window)
    return out


def cumulative_sum(xs):
    """[1, 2, 3] -> [1, 3, 6]."""
    out = []
    total = 0
    for x in xs:
        total += x
        out.append(total)
    return out


def weighted_mean(values, weights):
    """sum(v * w) / sum(w)."""
    total = sum(weights)
    if total == 0:
        raise ValueError("weights sum to zero")
    return sum(v * w for v, w in zip(values, weights, strict=True)) / total


def count_above(xs, threshold):
    """How many values are strictly greater than `threshold`."""
    return sum(1 for x in xs if x > threshold)


def histogram(xs, width):
    """{bucket start: count} for buckets [k*width, (k+1)*width)."""
    counts = {}
    for x in xs:
        start = (x // width) * width
        counts[start] = counts.get(start, 0) + 1
    return dict(sorted(counts.items()))
