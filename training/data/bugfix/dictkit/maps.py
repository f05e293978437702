"""Dictionary helpers."""


def invert(mapping):
    """{k: v} -> {v: k}; for repeated values the last key wins."""
    return {v: k for k, v in mapping.items()}


def get_in(mapping, path, default=None):
    """mapping[p0][p1]... or `default` when a key is missing."""
    current = mapping
    for key in path:
        if not isinstance(current, dict) or key not in current:
            return default
        current = current[key]
    return current


def set_in(mapping, path, value):
    """A copy of mapping with value at the nested path (missing levels created)."""
    if not path:
        return value
    out = dict(mapping)
    head, rest = path[0], path[1:]
    out[head] = set_in(out.get(head, {}), rest, value)
    return out


def deep_merge(a, b):
    """b merged into a copy of a; nested dicts are merged, other values from b win."""
    out = dict(a)
    for key, value in b.items():
        if key in out and isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def pick(mapping, keys):
    """Only the given keys (those present), in the order of `keys`."""
    return {k: mapping[k] for k in keys if k in mapping}


def omit(mapping, keys):
    """All but the given keys."""
    drop = set(keys)
    return {k: v for k, v in mapping.items() if k not in drop}


def count_by(items, key):
    """{key(item): how many items share it}."""
    counts = {}
    for item in items:
        k = key(item)
        counts[k] = counts.get(k, 0) + 1
    return counts


def group_by(items, key):
    """{key(item): [items in order]}."""
    groups = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def dict_diff(old, new):
    """(added keys, removed keys, changed keys), each sorted."""
    added = sorted(k for k in new if k not in old)
    removed = sorted(k for k in old if k not in new)
    changed = sorted(k for k in old if k in new and old[k] != new[k])
    return added, removed, changed


def merge_counts(a, b):
    """Adds the counts of b to those of a (a copy)."""
    out = dict(a)
    for key, n in b.items():
        out[key] = out.get(key, 0) + n
    return out


def top_keys(counts, n):
    """The n keys with the highest counts; ties by key order."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [k for k, _ in ranked[:n]]


def flatten_keys(mapping, sep="."):
    """{'a': {'b': 1}} -> {'a.b': 1}."""
    out = {}
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            for sub, inner in flatten_keys(value, sep).items():
                out[f"{key}{sep}{sub}"] = inner
        else:
            out[key] = value
    return out
