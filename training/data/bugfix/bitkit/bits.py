"""Bit manipulation on non-negative integers."""


def popcount(n):
    """Number of 1 bits."""
    count = 0
    while n:
        count += n & 1
        n >>= 1
    return count


def is_power_of_two(n):
    """True for 1, 2, 4, 8, ..."""
    return n > 0 and n & (n - 1) == 0


def set_bit(n, i):
    """n with bit i set."""
    return n | (1 << i)


def clear_bit(n, i):
    """n with bit i cleared."""
    return n & ~(1 << i)


def toggle_bit(n, i):
    """n with bit i flipped."""
    return n ^ (1 << i)


def get_bit(n, i):
    """0 or 1: bit i of n."""
    return (n >> i) & 1


def to_binary(n, width=0):
    """Binary digits of n, zero-padded to `width`."""
    digits = ""
    while n > 0:
        digits = str(n % 2) + digits
        n //= 2
    digits = digits or "0"
    return digits.rjust(width, "0")


def from_binary(text):
    """'1011' -> 11."""
    value = 0
    for ch in text:
        value = value * 2 + (1 if ch == "1" else 0)
    return value


def gray_code(n):
    """The n-th Gray code."""
    return n ^ (n >> 1)


def lowest_set_bit(n):
    """Index of the lowest 1 bit; -1 for 0."""
    if n == 0:
        return -1
    i = 0
    while not n & 1:
        n >>= 1
        i += 1
    return i


def bit_length(n):
    """Bits needed to write n (0 for 0)."""
    length = 0
    while n:
        n >>= 1
        length += 1
    return length


def parity(n):
    """1 when n has an odd number of 1 bits, else 0."""
    return popcount(n) % 2
