"""Searching and sorting."""


def binary_search(items, target):
    """Index of target in the sorted list, or -1."""
    lo, hi = 0, len(items) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if items[mid] == target:
            return mid
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1


def lower_bound(items, target):
    """The first index whose item is >= target (len(items) if none)."""
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def insertion_sort(items):
    """A sorted copy (stable)."""
    out = list(items)
    for i in range(1, len(out)):
        current = out[i]
        j = i - 1
        while j >= 0 and out[j] > current:
            out[j + 1] = out[j]
            j -= 1
        out[j + 1] = current
    return out


def is_sorted(items):
    """True when each item is <= the next."""
    for i in range(len(items) - 1):
        if items[i] > items[i + 1]:
            return False
    return True


def merge_sorted(a, b):
    """Merges two sorted lists into one sorted list."""
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return out + a[i:] + b[j:]


def max_subarray(xs):
    """The largest sum of a non-empty run of consecutive values (Kadane)."""
    best = current = xs[0]
    for x in xs[1:]:
        current = max(x, current + x)
        best = max(best, current)
    return best


def two_sum(xs, target):
    """Indices (i, j), i < j, of the first pair summing to target, or None."""
    seen = {}
    for j, x in enumerate(xs):
        if target - x in seen:
            return (seen[target - x], j)
        seen.setdefault(x, j)
    return None


def find_peak(xs):
    """Index of the first item larger than both neighbours (ends count one neighbour)."""
    n = len(xs)
    for i in range(n):
        left = xs[i - 1] if i > 0 else float("-inf")
        right = xs[i + 1] if i < n - 1 else float("-inf")
        if xs[i] > left and xs[i] > right:
            return i
    return -1


def kth_smallest(xs, k):
    """The k-th smallest value, k counted from 1."""
    if not 1 <= k <= len(xs):
        raise IndexError(k)
    return sorted(xs)[k - 1]


def argmax(xs):
    """Index of the first largest value."""
    best = 0
    for i in range(1, len(xs)):
        if xs[i] > xs[best]:
            best = i
    return best


def count_less(sorted_items, target):
    """How many items of a sorted list are < target."""
    return lower_bound(sorted_items, target)
