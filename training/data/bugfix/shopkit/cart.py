"""A shopping cart in integer cents. A cart is a list of (sku, unit_price_cents, quantity)."""

FREE_SHIPPING_FROM = 5000
SHIPPING_FLAT = 499


def line_total(unit_price, quantity):
    """Price of one cart line."""
    return unit_price * quantity


def subtotal(cart):
    """Sum of the line totals."""
    return sum(line_total(price, qty) for _, price, qty in cart)


def item_count(cart):
    """Total quantity over all lines."""
    return sum(qty for _, _, qty in cart)


def percent_off(amount, percent):
    """amount reduced by `percent`, rounded down to a cent."""
    return amount - amount * percent // 100


def shipping(amount):
    """Flat shipping, free from FREE_SHIPPING_FROM cents."""
    if amount >= FREE_SHIPPING_FROM:
        return 0
    return SHIPPING_FLAT


def tax(amount, rate_per_mille):
    """Tax at `rate_per_mille` (e.g. 75 for 7.5%), rounded half up."""
    return (amount * rate_per_mille + 500) // 1000


def bulk_price(unit_price, quantity, threshold=10, percent=10):
    """Line price with `percent` off when quantity reaches `threshold`."""
    total = line_total(unit_price, quantity)
    if quantity >= threshold:
        total = percent_off(total, percent)
    return total


def format_cents(cents):
    """1234 -> '$12.34', -5 -> '-$0.05'."""
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}${cents // 100}.{cents % 100:02d}"


def split_bill(total, people):
    """Shares that differ by at most a cent and add up to total (larger shares first)."""
    base, extra = divmod(total, people)
    return [base + 1 if i < extra else base for i in range(people)]


def remove_sku(cart, sku):
    """The cart without lines of that sku."""
    return [line for line in cart if line[0] != sku]


def most_expensive_line(cart):
    """The sku of the line with the largest total (first one on ties); None when empty."""
    best_sku, best_total = None, -1
    for sku, price, qty in cart:
        total = line_total(price, qty)
        if total > best_total:
            best_sku, best_total = sku, total
    return best_sku


def coupon_valid(code, used_codes, min_amount, amount):
    """A coupon applies when it is unused, well-formed (8 alphanumerics) and the amount is enough."""
    if code in used_codes:
        return False
    if len(code) != 8 or not code.isalnum():
        return False
    return amount >= min_amount
