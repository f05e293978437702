from timekit.dates import (
    add_days,
    age_on,
    day_of_year,
    days_in_month,
    days_until_weekend,
    format_hms,
    is_leap_year,
    minutes_between,
    parse_hms,
    quarter,
    to_12h,
    weekday,
)


def test_is_leap_year():
    assert is_leap_year(2024)
    assert is_leap_year(2000)
    assert not is_leap_year(1900)
    assert not is_leap_year(2023)


def test_days_in_month():
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2024, 1) == 31
    assert days_in_month(2024, 4) == 30
    assert days_in_month(2024, 12) == 31


def test_day_of_year():
    assert day_of_year(2023, 1, 1) == 1
    assert day_of_year(2023, 3, 1) == 60
    assert day_of_year(2024, 3, 1) == 61
    assert day_of_year(2023, 12, 31) == 365


def test_weekday():
    assert weekday(2024, 1, 1) == 0
    assert weekday(2000, 2, 29) == 1
    assert weekday(2023, 12, 31) == 6
    assert weekday(2021, 7, 4) == 6


def test_format_hms():
    assert format_hms(3725) == "01:02:05"
    assert format_hms(59) == "00:00:59"
    assert format_hms(36000) == "10:00:00"


def test_parse_hms():
    assert parse_hms("01:02:05") == 3725
    assert parse_hms("02:30") == 150
    assert parse_hms("7") == 7


def test_add_days():
    assert add_days(2023, 1, 30, 3) == (2023, 2, 2)
    assert add_days(2023, 12, 31, 1) == (2024, 1, 1)
    assert add_days(2024, 2, 28, 1) == (2024, 2, 29)
    assert add_days(2023, 5, 5, 0) == (2023, 5, 5)


def test_quarter():
    assert [quarter(m) for m in range(1, 13)] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]


def test_minutes_between():
    assert minutes_between("09:15", "10:00") == 45
    assert minutes_between("23:30", "00:15") == 45
    assert minutes_between("12:00", "12:00") == 0


def test_age_on():
    assert age_on((2000, 5, 20), (2024, 5, 20)) == 24
    assert age_on((2000, 5, 20), (2024, 5, 19)) == 23
    assert age_on((2000, 12, 31), (2001, 1, 1)) == 0


def test_to_12h():
    assert to_12h(0) == "12 AM"
    assert to_12h(11) == "11 AM"
    assert to_12h(12) == "12 PM"
    assert to_12h(13) == "1 PM"


def test_days_until_weekend():
    assert days_until_weekend(0) == 5
    assert days_until_weekend(4) == 1
    assert days_until_weekend(5) == 0
    assert days_until_weekend(6) == 0
