from shopkit.cart import (
    bulk_price,
    coupon_valid,
    format_cents,
    item_count,
    line_total,
    most_expensive_line,
    percent_off,
    remove_sku,
    shipping,
    split_bill,
    subtotal,
    tax,
)

CART = [("apple", 50, 4), ("pear", 120, 1), ("fig", 300, 2)]


def test_line_total():
    assert line_total(250, 3) == 750
    assert line_total(99, 0) == 0


def test_subtotal():
    assert subtotal(CART) == 200 + 120 + 600
    assert subtotal([]) == 0


def test_item_count():
    assert item_count(CART) == 7
    assert item_count([]) == 0


def test_percent_off():
    assert percent_off(1000, 10) == 900
    assert percent_off(999, 50) == 500
    assert percent_off(1000, 0) == 1000


def test_shipping():
    assert shipping(4999) == 499
    assert shipping(5000) == 0
    assert shipping(0) == 499


def test_tax():
    assert tax(1000, 75) == 75
    assert tax(1234, 75) == 93
    assert tax(100, 5) == 1
    assert tax(0, 200) == 0


def test_bulk_price():
    assert bulk_price(100, 9) == 900
    assert bulk_price(100, 10) == 900
    assert bulk_price(100, 20, threshold=5, percent=25) == 1500


def test_format_cents():
    assert format_cents(1234) == "$12.34"
    assert format_cents(5) == "$0.05"
    assert format_cents(-5) == "-$0.05"
    assert format_cents(100) == "$1.00"


def test_split_bill():
    assert split_bill(1000, 3) == [334, 333, 333]
    assert split_bill(900, 3) == [300, 300, 300]
    assert split_bill(5, 4) == [2, 1, 1, 1]


def test_remove_sku():
    assert remove_sku(CART, "pear") == [("apple", 50, 4), ("fig", 300, 2)]
    assert remove_sku(CART, "kiwi") == CART


def test_most_expensive_line():
    assert most_expensive_line(CART) == "fig"
    assert most_expensive_line([("a", 10, 1), ("b", 5, 2)]) == "a"
    assert most_expensive_line([]) is None


def test_coupon_valid():
    assert coupon_valid("SAVE2024", set(), 1000, 1500)
    assert not coupon_valid("SAVE2024", {"SAVE2024"}, 1000, 1500)
    assert not coupon_valid("SAVE-024", set(), 1000, 1500)
    assert not coupon_valid("SAVE20", set(), 1000, 1500)
    assert not coupon_valid("SAVE2024", set(), 1000, 999)
    assert coupon_valid("SAVE2024", set(), 1000, 1000)
