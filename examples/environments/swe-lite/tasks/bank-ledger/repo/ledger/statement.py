"""Plain-text account statements."""

from decimal import Decimal


def statement_lines(account):
    """Return the lines of a statement for ``account``.

    The first line names the owner, then every transaction is listed with
    its signed amount and the running balance, and a final line shows the
    closing balance.
    """
    lines = [f"Statement for {account.owner}"]
    running = Decimal("0")
    for transaction in account.transactions:
        running += transaction.signed_amount
        memo = f" ({transaction.memo})" if transaction.memo else ""
        lines.append(
            f"{transaction.kind:<12} {transaction.signed_amount:>+10.2f} "
            f"{running:>10.2f}{memo}"
        )
    lines.append(f"Closing balance: {running:.2f}")
    return lines
