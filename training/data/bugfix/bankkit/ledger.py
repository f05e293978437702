"""An account ledger in integer cents. A transaction is (kind, amount) with kind 'in' or 'out'."""

OVERDRAFT_FEE = 2500


def balance(transactions, opening=0):
    """The balance after all transactions."""
    total = opening
    for kind, amount in transactions:
        if kind == "in":
            total += amount
        else:
            total -= amount
    return total


def running_balance(transactions, opening=0):
    """The balance after each transaction."""
    out = []
    total = opening
    for kind, amount in transactions:
        total += amount if kind == "in" else -amount
        out.append(total)
    return out


def largest_withdrawal(transactions):
    """The largest 'out' amount (0 when there is none)."""
    best = 0
    for kind, amount in transactions:
        if kind == "out" and amount > best:
            best = amount
    return best


def can_withdraw(current, amount, overdraft_limit=0):
    """True when the balance may go down to -overdraft_limit but no further."""
    return amount > 0 and current - amount >= -overdraft_limit


def overdraft_fees(transactions, opening=0):
    """OVERDRAFT_FEE for each transaction that takes the balance from >= 0 to below 0."""
    fees = 0
    total = opening
    for kind, amount in transactions:
        before = total
        total += amount if kind == "in" else -amount
        if before >= 0 and total < 0:
            fees += OVERDRAFT_FEE
    return fees


def simple_interest(principal, rate_percent, years):
    """Interest earned (not the new balance), rounded down to a cent."""
    return principal * rate_percent * years // 100


def compound(principal, rate_percent, years):
    """The balance after yearly compounding, each year rounded down to a cent."""
    amount = principal
    for _ in range(years):
        amount += amount * rate_percent // 100
    return amount


def monthly_totals(dated):
    """{'YYYY-MM': net amount} for (date 'YYYY-MM-DD', kind, amount) entries, sorted by month."""
    totals = {}
    for date, kind, amount in dated:
        month = date[:7]
        delta = amount if kind == "in" else -amount
        totals[month] = totals.get(month, 0) + delta
    return dict(sorted(totals.items()))


def split_in_out(transactions):
    """(total in, total out)."""
    total_in = sum(a for k, a in transactions if k == "in")
    total_out = sum(a for k, a in transactions if k == "out")
    return total_in, total_out


def days_to_goal(current, goal, daily_saving):
    """Whole days of saving needed to reach goal (0 when already there)."""
    if current >= goal:
        return 0
    missing = goal - current
    return (missing + daily_saving - 1) // daily_saving


def categorize(amount):
    """'small' below 1000 cents, 'medium' below 100000, else 'large'."""
    if amount < 1000:
        return "small"
    if amount < 100000:
        return "medium"
    return "large"


def loan_payment(principal, months):
    """Equal monthly payments (no interest), the last one taking the remainder."""
    base = principal // months
    payments = [base] * months
    payments[-1] += principal - base * months
    return payments
