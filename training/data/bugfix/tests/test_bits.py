from bitkit.bits import (
    bit_length,
    clear_bit,
    from_binary,
    get_bit,
    gray_code,
    is_power_of_two,
    lowest_set_bit,
    parity,
    popcount,
    set_bit,
    to_binary,
    toggle_bit,
)


def test_popcount():
    assert popcount(0) == 0
    assert popcount(7) == 3
    assert popcount(0b101000) == 2
    assert popcount(255) == 8


def test_is_power_of_two():
    assert [n for n in range(20) if is_power_of_two(n)] == [1, 2, 4, 8, 16]
    assert is_power_of_two(1024)
    assert not is_power_of_two(1023)


def test_set_bit():
    assert set_bit(0, 3) == 8
    assert set_bit(5, 1) == 7
    assert set_bit(5, 0) == 5


def test_clear_bit():
    assert clear_bit(15, 0) == 14
    assert clear_bit(8, 3) == 0
    assert clear_bit(4, 0) == 4


def test_toggle_bit():
    assert toggle_bit(5, 0) == 4
    assert toggle_bit(4, 0) == 5
    assert toggle_bit(0, 4) == 16


def test_get_bit():
    assert get_bit(5, 0) == 1
    assert get_bit(5, 1) == 0
    assert get_bit(5, 2) == 1
    assert get_bit(1, 7) == 0


def test_to_binary():
    assert to_binary(11) == "1011"
    assert to_binary(0) == "0"
    assert to_binary(5, width=8) == "00000101"
    assert to_binary(1) == "1"


def test_from_binary():
    assert from_binary("1011") == 11
    assert from_binary("0") == 0
    assert from_binary("100000") == 32


def test_gray_code():
    assert [gray_code(n) for n in range(8)] == [0, 1, 3, 2, 6, 7, 5, 4]


def test_lowest_set_bit():
    assert lowest_set_bit(0) == -1
    assert lowest_set_bit(1) == 0
    assert lowest_set_bit(12) == 2
    assert lowest_set_bit(64) == 6


def test_bit_length():
    assert [bit_length(n) for n in (0, 1, 2, 3, 4, 255, 256)] == [0, 1, 2, 2, 3, 8, 9]


def test_parity():
    assert parity(0) == 0
    assert parity(7) == 1
    assert parity(6) == 0
