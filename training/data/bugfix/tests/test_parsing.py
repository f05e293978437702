import pytest
from textkit.parsing import (
    count_indent,
    parse_bool,
    parse_duration,
    parse_int_list,
    parse_money,
    parse_pairs,
    parse_query,
    parse_range,
    parse_ranges,
    parse_version,
    split_csv_line,
)


def test_parse_pairs():
    assert parse_pairs("a=1;b=2") == {"a": "1", "b": "2"}
    assert parse_pairs(" x = y ; ;z=") == {"x": "y", "z": ""}
    assert parse_pairs("k=v=w") == {"k": "v=w"}
    assert parse_pairs("a:1,b:2", sep=",", kv=":") == {"a": "1", "b": "2"}


def test_parse_int_list():
    assert parse_int_list("1, 2,3") == [1, 2, 3]
    assert parse_int_list("   ") == []
    assert parse_int_list("-4") == [-4]


def test_parse_bool():
    assert parse_bool("Yes") is True
    assert parse_bool(" off ") is False
    assert parse_bool("1") is True
    assert parse_bool("FALSE") is False
    with pytest.raises(ValueError):
        parse_bool("maybe")


def test_parse_duration():
    assert parse_duration("1h30m") == 5400
    assert parse_duration("45s") == 45
    assert parse_duration("2h5s") == 7205
    assert parse_duration("") == 0
    with pytest.raises(ValueError):
        parse_duration("10")
    with pytest.raises(ValueError):
        parse_duration("h")


def test_parse_version():
    assert parse_version("1.10.2") == (1, 10, 2)
    assert parse_version("v2") == (2, 0, 0)
    assert parse_version("3.1") == (3, 1, 0)
    assert parse_version("1.2.3.4") == (1, 2, 3)


def test_split_csv_line():
    assert split_csv_line("a,b,c") == ["a", "b", "c"]
    assert split_csv_line('x,"y,z",w') == ["x", "y,z", "w"]
    assert split_csv_line("") == [""]
    assert split_csv_line("a,,") == ["a", "", ""]


def test_parse_range():
    assert parse_range("3-6") == [3, 4, 5, 6]
    assert parse_range("7") == [7]
    assert parse_range("2-2") == [2]


def test_parse_ranges():
    assert parse_ranges("1-3,5") == [1, 2, 3, 5]
    assert parse_ranges("5, 1-2, 2") == [1, 2, 5]
    assert parse_ranges("") == []


def test_parse_query():
    assert parse_query("?a=1&b=x%20y") == {"a": "1", "b": "x y"}
    assert parse_query("q=hello+world&flag") == {"q": "hello world"}
    assert parse_query("k=a=b") == {"k": "a=b"}


def test_parse_money():
    assert parse_money("$1,234.50") == 123450
    assert parse_money("12") == 1200
    assert parse_money("-$3.5") == -350
    assert parse_money("0.07") == 7


def test_count_indent():
    assert count_indent("    x") == 4
    assert count_indent("\tx") == 4
    assert count_indent("\t  x", tab=8) == 10
    assert count_indent("x  ") == 0
