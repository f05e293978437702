import pytest
from numkit.arith import (
    clamp,
    digit_sum,
    divisors,
    factorial,
    fibonacci,
    gcd,
    int_sqrt,
    is_prime,
    lcm,
    power_mod,
    round_half_up,
    sign,
)


def test_gcd():
    assert gcd(12, 18) == 6
    assert gcd(-4, 6) == 2
    assert gcd(7, 0) == 7
    assert gcd(0, 0) == 0


def test_lcm():
    assert lcm(4, 6) == 12
    assert lcm(-3, 5) == 15
    assert lcm(0, 9) == 0
    assert lcm(7, 7) == 7


def test_is_prime():
    assert [n for n in range(20) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19]
    assert is_prime(97)
    assert not is_prime(91)
    assert not is_prime(-7)


def test_factorial():
    assert factorial(0) == 1
    assert factorial(1) == 1
    assert factorial(5) == 120
    with pytest.raises(ValueError):
        factorial(-1)


def test_fibonacci():
    assert [fibonacci(n) for n in range(8)] == [0, 1, 1, 2, 3, 5, 8, 13]
    assert fibonacci(20) == 6765


def test_digit_sum():
    assert digit_sum(1234) == 10
    assert digit_sum(-505) == 10
    assert digit_sum(0) == 0
    assert digit_sum(9) == 9


def test_clamp():
    assert clamp(5, 0, 3) == 3
    assert clamp(-1, 0, 3) == 0
    assert clamp(2, 0, 3) == 2
    assert clamp(3, 0, 3) == 3


def test_sign():
    assert sign(10) == 1
    assert sign(-0.5) == -1
    assert sign(0) == 0


def test_int_sqrt():
    assert [int_sqrt(n) for n in range(10)] == [0, 1, 1, 1, 2, 2, 2, 2, 2, 3]
    assert int_sqrt(99) == 9
    assert int_sqrt(100) == 10


def test_power_mod():
    assert power_mod(2, 10, 1000) == 24
    assert power_mod(3, 0, 7) == 1
    assert power_mod(5, 3, 1) == 0
    assert power_mod(7, 5, 13) == pow(7, 5, 13)


def test_divisors():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(16) == [1, 2, 4, 8, 16]
    assert divisors(1) == [1]
    assert divisors(13) == [1, 13]


def test_round_half_up():
    assert round_half_up(5, 10) == 10
    assert round_half_up(14, 10) == 10
    assert round_half_up(-15, 10) == -20
    assert round_half_up(7) == 7
    assert round_half_up(24, 5) == 25
