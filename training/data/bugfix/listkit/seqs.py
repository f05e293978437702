"""List and sequence helpers."""


def chunk(items, size):
    """Consecutive pieces of `size` items (the last may be shorter)."""
    if size < 1:
        raise ValueError("size must be positive")
    return [items[i:i + size] for i in range(0, len(items), size)]


def flatten(nested):
    """One level: [[1, 2], [3]] -> [1, 2, 3]."""
    out = []
    for inner in nested:
        out.extend(inner)
    return out


def unique(items):
    """Items without repeats, in first-seen order."""
    seen = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def rotate(items, k):
    """Rotates left by k: rotate([1, 2, 3], 1) -> [2, 3, 1]."""
    if not items:
        return []
    k %= len(items)
    return items[k:] + items[:k]


def interleave(a, b):
    """a0, b0, a1, b1, ...; the longer list's rest follows."""
    out = []
    for i in range(max(len(a), len(b))):
        if i < len(a):
            out.append(a[i])
        if i < len(b):
            out.append(b[i])
    return out


def pairwise(items):
    """[1, 2, 3] -> [(1, 2), (2, 3)]."""
    return [(items[i], items[i + 1]) for i in range(len(items) - 1)]


def take_while_positive(items):
    """The leading run of items greater than zero."""
    out = []
    for x in items:
        if x <= 0:
            break
        out.append(x)
    return out


def group_runs(items):
    """[1, 1, 2, 1] -> [[1, 1], [2], [1]]."""
    runs = []
    for x in items:
        if runs and runs[-1][0] == x:
            runs[-1].append(x)
        else:
            runs.append([x])
    return runs


def last_index(items, target):
    """Index of the last occurrence of target, or -1."""
    for i in range(len(items) - 1, -1, -1):
        if items[i] == target:
            return i
    return -1


def split_at(items, predicate):
    """Splits into sublists at items where predicate(item) is true (those items dropped)."""
    parts = [[]]
    for x in items:
        if predicate(x):
            parts.append([])
        else:
            parts[-1].append(x)
    return parts


def every_nth(items, n, start=0):
    """items[start], items[start + n], ..."""
    return items[start::n]


def zip_longest_fill(a, b, fill=None):
    """Pairs of a and b, padding the shorter with `fill`."""
    n = max(len(a), len(b))
    a = a + [fill] * (n - len(a))
    b = b + [fill] * (n - len(b))
    return list(zip(a, b, strict=True))
