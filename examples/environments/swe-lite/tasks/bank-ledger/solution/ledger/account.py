"""Accounts whose balance is derived from their transaction history."""

from decimal import Decimal

from .transaction import Transaction


class InsufficientFunds(Exception):
    """Raised when a withdrawal or transfer would overdraw an account."""


class Account:
    """A bank account owned by ``owner``.

    ``transactions`` lets you restore an account from a saved history;
    a new account starts with no transactions and a balance of zero.  The
    balance is never stored, it is always recomputed from the history.
    """

    def __init__(self, owner, transactions=None):
        self.owner = owner
        self.transactions = [] if transactions is None else transactions

    def __repr__(self):
        return f"Account({self.owner!r}, balance={self.balance})"

    @property
    def balance(self):
        """Current balance as a :class:`~decimal.Decimal`."""
        return sum((t.signed_amount for t in self.transactions), Decimal("0"))

    def deposit(self, amount, memo=""):
        """Add money to the account and return the new transaction."""
        return self._record(Transaction("deposit", amount, memo))

    def withdraw(self, amount, memo=""):
        """Take money out; raises :class:`InsufficientFunds` if it is not there."""
        transaction = Transaction("withdrawal", amount, memo)
        self._check_funds(transaction.amount)
        return self._record(transaction)

    def transfer_to(self, other, amount, memo=""):
        """Move ``amount`` from this account to ``other``."""
        outgoing = Transaction("transfer_out", amount, memo or f"to {other.owner}")
        self._check_funds(outgoing.amount)
        self._record(outgoing)
        other._record(Transaction("transfer_in", amount, memo or f"from {self.owner}"))
        return outgoing

    def _check_funds(self, amount):
        if amount > self.balance:
            raise InsufficientFunds(
                f"{self.owner} has {self.balance}, cannot take out {amount}"
            )

    def _record(self, transaction):
        self.transactions.append(transaction)
        return transaction
