"""Integer arithmetic."""


def gcd(a, b):
    """Greatest common divisor (always >= 0)."""
    a, b = abs(a), abs(b)
    while b:
        a, b = b, a % b
    return a


def lcm(a, b):
    """Least common multiple; 0 when either is 0."""
    if a == 0 or b == 0:
        return 0
    return abs(a * b) // gcd(a, b)


def is_prime(n):
    """True for 2, 3, 5, 7, ..."""
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True


def factorial(n):
    """n! for n >= 0; ValueError for negative n."""
    if n < 0:
        raise ValueError("negative")
    result = 1
    for k in range(2, n + 1):
        result *= k
    return result


def fibonacci(n):
    """The n-th Fibonacci number: fibonacci(0) == 0, fibonacci(1) == 1."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def digit_sum(n):
    """Sum of the decimal digits of |n|."""
    n = abs(n)
    total = 0
    while n > 0:
        total += n % 10
        n //= 10
    return total


def clamp(value, low, high):
    """value limited to [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value


def sign(x):
    """-1, 0 or 1."""
    if x > 0:
        return 1
    if x < 0:
        return -1
    return 0


def int_sqrt(n):
    """The largest r with r * r <= n (n >= 0)."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if mid * mid <= n:
            lo = mid
        else:
            hi = mid - 1
    return lo


def power_mod(base, exp, mod):
    """base ** exp % mod by repeated squaring."""
    result = 1
    base %= mod
    while exp > 0:
        if exp & 1:
            result = result * base % mod
        base = base * base % mod
        exp >>= 1
    return result % mod


def divisors(n):
    """The positive divisors of n > 0, ascending."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def round_half_up(x, step=1):
    """x rounded to a multiple of `step` (an int), halves away from zero."""
    q, r = divmod(abs(x), step)
    if 2 * r >= step:
        q += 1
    return q * step if x >= 0 else -q * step
