import pytest
from unitkit.convert import (
    c_to_f,
    clock,
    f_to_c,
    from_roman,
    human_size,
    km_to_miles,
    ordinal,
    parse_size,
    percent_change,
    roman,
    round_to_step,
    thousands,
)


def test_c_to_f():
    assert c_to_f(0) == 32
    assert c_to_f(100) == 212
    assert c_to_f(-40) == -40


def test_f_to_c():
    assert f_to_c(32) == 0
    assert f_to_c(212) == 100
    assert f_to_c(-40) == -40


def test_km_to_miles():
    assert km_to_miles(1.609344) == 1.0
    assert km_to_miles(10) == 6.21
    assert km_to_miles(10, digits=0) == 6.0


def test_human_size():
    assert human_size(512) == "512 B"
    assert human_size(1536) == "1.5 KB"
    assert human_size(1024) == "1.0 KB"
    assert human_size(5 * 1024**3) == "5.0 GB"
    assert human_size(1023) == "1023 B"


def test_parse_size():
    assert parse_size("1.5 KB") == 1536
    assert parse_size("10 B") == 10
    assert parse_size("2MB") == 2097152
    assert parse_size("7") == 7
    assert parse_size("1 gb") == 1024**3


def test_clock():
    assert clock(90) == "1:30"
    assert clock(3600) == "1:00:00"
    assert clock(3725) == "1:02:05"
    assert clock(5) == "0:05"


def test_round_to_step():
    assert round_to_step(12, 5) == 10
    assert round_to_step(13, 5) == 15
    assert round_to_step(15, 10) == 20
    assert round_to_step(14, 10) == 10


def test_percent_change():
    assert percent_change(50, 75) == 50.0
    assert percent_change(200, 150) == -25.0
    assert percent_change(3, 4) == 33.3
    with pytest.raises(ZeroDivisionError):
        percent_change(0, 5)


def test_ordinal():
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st", "111th"]


def test_thousands():
    assert thousands(1234567) == "1,234,567"
    assert thousands(999) == "999"
    assert thousands(1000) == "1,000"
    assert thousands(-1234, sep=".") == "-1.234"


def test_roman():
    assert roman(1994) == "MCMXCIV"
    assert roman(4) == "IV"
    assert roman(3999) == "MMMCMXCIX"
    assert roman(8) == "VIII"


def test_from_roman():
    assert from_roman("MCMXCIV") == 1994
    assert from_roman("IV") == 4
    assert from_roman("VIII") == 8
    assert from_roman("XL") == 40
