from dictkit.maps import (
    count_by,
    deep_merge,
    dict_diff,
    flatten_keys,
    get_in,
    group_by,
    invert,
    merge_counts,
    omit,
    pick,
    set_in,
    top_keys,
)


def test_invert():
    assert invert({"a": 1, "b": 2}) == {1: "a", 2: "b"}
    assert invert({"a": 1, "b": 1}) == {1: "b"}
    assert invert({}) == {}


def test_get_in():
    data = {"a": {"b": {"c": 3}}, "x": 5}
    assert get_in(data, ["a", "b", "c"]) == 3
    assert get_in(data, ["a", "z"]) is None
    assert get_in(data, ["x", "y"], default=0) == 0
    assert get_in(data, []) == data


def test_set_in():
    assert set_in({}, ["a", "b"], 1) == {"a": {"b": 1}}
    original = {"a": {"c": 2}}
    assert set_in(original, ["a", "b"], 1) == {"a": {"c": 2, "b": 1}}
    assert original == {"a": {"c": 2}}


def test_deep_merge():
    a = {"x": 1, "n": {"p": 1, "q": 2}}
    b = {"y": 2, "n": {"q": 3}}
    assert deep_merge(a, b) == {"x": 1, "n": {"p": 1, "q": 3}, "y": 2}
    assert deep_merge({"k": {"a": 1}}, {"k": 5}) == {"k": 5}
    assert a == {"x": 1, "n": {"p": 1, "q": 2}}


def test_pick():
    assert pick({"a": 1, "b": 2, "c": 3}, ["c", "a"]) == {"c": 3, "a": 1}
    assert pick({"a": 1}, ["z"]) == {}


def test_omit():
    assert omit({"a": 1, "b": 2, "c": 3}, ["b"]) == {"a": 1, "c": 3}
    assert omit({"a": 1}, []) == {"a": 1}


def test_count_by():
    assert count_by(["apple", "avocado", "banana"], lambda s: s[0]) == {"a": 2, "b": 1}
    assert count_by([], len) == {}
    assert count_by([1, 2, 3, 4], lambda n: n % 2) == {1: 2, 0: 2}


def test_group_by():
    assert group_by([1, 2, 3, 4], lambda n: n % 2 == 0) == {False: [1, 3], True: [2, 4]}
    assert group_by(["aa", "b"], len) == {2: ["aa"], 1: ["b"]}


def test_dict_diff():
    old = {"a": 1, "b": 2, "c": 3}
    new = {"b": 2, "c": 4, "d": 5}
    assert dict_diff(old, new) == (["d"], ["a"], ["c"])
    assert dict_diff({}, {}) == ([], [], [])


def test_merge_counts():
    assert merge_counts({"a": 1}, {"a": 2, "b": 1}) == {"a": 3, "b": 1}
    assert merge_counts({}, {"x": 4}) == {"x": 4}


def test_top_keys():
    counts = {"a": 3, "b": 5, "c": 3, "d": 1}
    assert top_keys(counts, 2) == ["b", "a"]
    assert top_keys(counts, 3) == ["b", "a", "c"]
    assert top_keys(counts, 0) == []


def test_flatten_keys():
    assert flatten_keys({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}
    assert flatten_keys({"a": {}}, sep="/") == {"a": {}}
    assert flatten_keys({"a": {"b": 1}}, sep="/") == {"a/b": 1}
