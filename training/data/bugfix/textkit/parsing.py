"""Parsing small text formats."""


def parse_pairs(text, sep=";", kv="="):
    """'a=1;b=2' -> {'a': '1', 'b': '2'}; blank items are skipped, values keep inner '='."""
    out = {}
    for item in text.split(sep):
        item = item.strip()
        if not item:
            continue
        key, _, value = item.partition(kv)
        out[key.strip()] = value.strip()
    return out


def parse_int_list(text):
    """'1, 2,3' -> [1, 2, 3]; '' -> []."""
    if not text.strip():
        return []
    return [int(part) for part in text.split(",")]


def parse_bool(text):
    """yes/no, true/false, on/off, 1/0 (any case) -> bool; anything else raises ValueError."""
    value = text.strip().lower()
    if value in ("yes", "true", "on", "1"):
        return True
    if value in ("no", "false", "off", "0"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def parse_duration(text):
    """'1h30m', '45s', '2h5s' -> seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    total = 0
    number = ""
    for ch in text:
        if ch.isdigit():
            number += ch
        elif ch in units and number:
            total += int(number) * units[ch]
            number = ""
        else:
            raise ValueError(f"bad duration: {text!r}")
    if number:
        raise ValueError(f"bad duration: {text!r}")
    return total


def parse_version(text):
    """'1.10.2' -> (1, 10, 2); a leading 'v' is allowed; missing parts are 0."""
    if text.startswith("v"):
        text = text[1:]
    parts = [int(p) for p in text.split(".")]
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts[:3])


def split_csv_line(line):
    """Splits on commas outside double quotes; quotes are removed."""
    fields = []
    current = ""
    quoted = False
    for ch in line:
        if ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            fields.append(current)
            current = ""
        else:
            current += ch
    fields.append(current)
    return fields


def parse_range(text):
    """'3-6' -> [3, 4, 5, 6]; '7' -> [7]."""
    if "-" in text:
        start, end = text.split("-", 1)
        return list(range(int(start), int(end) + 1))
    return [int(text)]


def parse_ranges(text):
    """'1-3,5' -> [1, 2, 3, 5] (sorted, no repeats)."""
    numbers = set()
    for part in text.split(","):
        if part.strip():
            numbers.update(parse_range(part.strip()))
    return sorted(numbers)


def parse_query(query):
    """'?a=1&b=x%20y' -> {'a': '1', 'b': 'x y'} (only %20 and + are decoded)."""
    if query.startswith("?"):
        query = query[1:]
    out = {}
    for pair in query.split("&"):
        if "=" in pair:
            key, value = pair.split("=", 1)
            out[key] = value.replace("+", " ").replace("%20", " ")
    return out


def parse_money(text):
    """'$1,234.50' -> 123450 (cents); a leading '-' makes it negative."""
    text = text.strip()
    negative = text.startswith("-")
    digits = text.lstrip("-").lstrip("$").replace(",", "")
    whole, _, frac = digits.partition(".")
    cents = int(whole or "0") * 100 + int((frac + "00")[:2])
    return -cents if negative else cents


def count_indent(line, tab=4):
    """The indentation width of a line; a tab counts as `tab` spaces."""
    width = 0
    for ch in line:
        if ch == " ":
            width += 1
        elif ch == "\t":
            width += tab
        else:
            break
    return width
