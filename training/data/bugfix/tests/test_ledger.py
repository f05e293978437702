from bankkit.ledger import (
    balance,
    can_withdraw,
    categorize,
    compound,
    days_to_goal,
    largest_withdrawal,
    loan_payment,
    monthly_totals,
    overdraft_fees,
    running_balance,
    simple_interest,
    split_in_out,
)

TX = [("in", 1000), ("out", 300), ("out", 900), ("in", 500)]


def test_balance():
    assert balance(TX) == 300
    assert balance([], opening=50) == 50
    assert balance([("out", 10)], opening=5) == -5


def test_running_balance():
    assert running_balance(TX) == [1000, 700, -200, 300]
    assert running_balance([("in", 5)], opening=10) == [15]
    assert running_balance([]) == []


def test_largest_withdrawal():
    assert largest_withdrawal(TX) == 900
    assert largest_withdrawal([("in", 5000)]) == 0
    assert largest_withdrawal([("out", 1), ("out", 2)]) == 2


def test_can_withdraw():
    assert can_withdraw(100, 100)
    assert not can_withdraw(100, 101)
    assert can_withdraw(100, 150, overdraft_limit=50)
    assert not can_withdraw(100, 151, overdraft_limit=50)
    assert not can_withdraw(100, 0)


def test_overdraft_fees():
    assert overdraft_fees(TX) == 2500
    assert overdraft_fees([("out", 5), ("out", 5)]) == 2500
    assert overdraft_fees([("out", 5), ("in", 10), ("out", 10)]) == 5000
    assert overdraft_fees([("out", 5)], opening=5) == 0


def test_simple_interest():
    assert simple_interest(10000, 5, 2) == 1000
    assert simple_interest(999, 10, 1) == 99
    assert simple_interest(10000, 0, 5) == 0


def test_compound():
    assert compound(10000, 10, 2) == 12100
    assert compound(10000, 10, 0) == 10000
    assert compound(1000, 5, 3) == 1157


def test_monthly_totals():
    dated = [("2024-02-03", "in", 100), ("2024-01-30", "out", 40), ("2024-02-20", "out", 30)]
    assert monthly_totals(dated) == {"2024-01": -40, "2024-02": 70}
    assert monthly_totals([]) == {}


def test_split_in_out():
    assert split_in_out(TX) == (1500, 1200)
    assert split_in_out([]) == (0, 0)


def test_days_to_goal():
    assert days_to_goal(0, 1000, 100) == 10
    assert days_to_goal(0, 1001, 100) == 11
    assert days_to_goal(500, 500, 7) == 0
    assert days_to_goal(900, 1000, 1000) == 1


def test_categorize():
    assert categorize(999) == "small"
    assert categorize(1000) == "medium"
    assert categorize(99999) == "medium"
    assert categorize(100000) == "large"


def test_loan_payment():
    assert loan_payment(1000, 3) == [333, 333, 334]
    assert loan_payment(900, 3) == [300, 300, 300]
    assert loan_payment(5, 1) == [5]
