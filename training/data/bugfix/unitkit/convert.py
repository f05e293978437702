"""Unit conversions and number formatting."""

SIZE_UNITS = ("B", "KB", "MB", "GB", "TB")


def c_to_f(celsius):
    """Celsius to Fahrenheit."""
    return celsius * 9 / 5 + 32


def f_to_c(fahrenheit):
    """Fahrenheit to Celsius."""
    return (fahrenheit - 32) * 5 / 9


def km_to_miles(km, digits=2):
    """Kilometres to miles, rounded."""
    return round(km / 1.609344, digits)


def human_size(n):
    """1536 -> '1.5 KB' (powers of 1024, one decimal; bytes as a whole number)."""
    unit = 0
    value = float(n)
    while value >= 1024 and unit < len(SIZE_UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{n} B"
    return f"{value:.1f} {SIZE_UNITS[unit]}"


def parse_size(text):
    """'1.5 KB' -> 1536, '10 B' -> 10, '2MB' -> 2097152."""
    text = text.strip().upper()
    for power in range(len(SIZE_UNITS) - 1, -1, -1):
        unit = SIZE_UNITS[power]
        if text.endswith(unit):
            number = float(text[: -len(unit)].strip())
            return int(number * 1024**power)
    return int(text)


def clock(seconds):
    """90 -> '1:30', 3600 -> '1:00:00' (hours only when needed)."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def round_to_step(value, step):
    """The multiple of `step` nearest to value (halves round up)."""
    return (value + step // 2) // step * step


def percent_change(old, new):
    """Percentage change from old to new, rounded to one decimal."""
    if old == 0:
        raise ZeroDivisionError("no change from zero")
    return round((new - old) * 100 / old, 1)


def ordinal(n):
    """1 -> '1st', 12 -> '12th', 23 -> '23rd'."""
    if 10 <= n % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def thousands(n, sep=","):
    """1234567 -> '1,234,567'."""
    digits = str(abs(n))
    groups = []
    while len(digits) > 3:
        groups.insert(0, digits[-3:])
        digits = digits[:-3]
    groups.insert(0, digits)
    return ("-" if n < 0 else "") + sep.join(groups)


def roman(n):
    """1..3999 in Roman numerals."""
    table = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
             (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = []
    for value, letters in table:
        while n >= value:
            out.append(letters)
            n -= value
    return "".join(out)


def from_roman(text):
    """'XIV' -> 14."""
    values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    total = 0
    for i, ch in enumerate(text):
        value = values[ch]
        if i + 1 < len(text) and values[text[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
