"""Calendar arithmetic on plain integers (no datetime)."""

MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_leap_year(year):
    """Gregorian leap years."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    """28-31 for month 1..12."""
    if month == 2 and is_leap_year(year):
        return 29
    return MONTH_DAYS[month - 1]


def day_of_year(year, month, day):
    """1 for January 1st."""
    total = day
    for m in range(1, month):
        total += days_in_month(year, m)
    return total


def weekday(year, month, day):
    """0 = Monday ... 6 = Sunday (Zeller's congruence)."""
    if month < 3:
        month += 12
        year -= 1
    k, j = year % 100, year // 100
    h = (day + 13 * (month + 1) // 5 + k + k // 4 + j // 4 + 5 * j) % 7
    return (h + 5) % 7


def format_hms(seconds):
    """3725 -> '01:02:05'."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def parse_hms(text):
    """'01:02:05' -> 3725; 'MM:SS' is accepted too."""
    parts = [int(p) for p in text.split(":")]
    total = 0
    for part in parts:
        total = total * 60 + part
    return total


def add_days(year, month, day, n):
    """The date n >= 0 days later, as (year, month, day)."""
    day += n
    while day > days_in_month(year, month):
        day -= days_in_month(year, month)
        month += 1
        if month > 12:
            month = 1
            year += 1
    return year, month, day


def quarter(month):
    """1 for Jan-Mar ... 4 for Oct-Dec."""
    return (month - 1) // 3 + 1


def minutes_between(start, end):
    """Minutes from 'HH:MM' start to end, wrapping past midnight."""
    sh, sm = (int(p) for p in start.split(":"))
    eh, em = (int(p) for p in end.split(":"))
    diff = (eh * 60 + em) - (sh * 60 + sm)
    if diff < 0:
        diff += 24 * 60
    return diff


def age_on(birth, today):
    """Whole years between two (year, month, day) dates."""
    years = today[0] - birth[0]
    if (today[1], today[2]) < (birth[1], birth[2]):
        years -= 1
    return years


def to_12h(hour):
    """13 -> '1 PM', 0 -> '12 AM'."""
    suffix = "AM" if hour < 12 else "PM"
    h = hour % 12
    if h == 0:
        h = 12
    return f"{h} {suffix}"


def days_until_weekend(day_index):
    """Days from weekday `day_index` (0 = Monday) to the next Saturday; 0 on weekends."""
    if day_index >= 5:
        return 0
    return 5 - day_index
