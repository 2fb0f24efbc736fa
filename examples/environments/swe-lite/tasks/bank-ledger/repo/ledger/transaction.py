"""The :class:`Transaction` record."""

from dataclasses import dataclass
from decimal import Decimal

KINDS = ("deposit", "withdrawal", "transfer_in", "transfer_out")


@dataclass(frozen=True)
class Transaction:
    """One movement of money on an account.

    ``amount`` is always positive; ``kind`` says in which direction the
    money moved.  ``memo`` is free text shown on statements.
    """

    kind: str
    amount: Decimal
    memo: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown transaction kind {self.kind!r}")
        amount = Decimal(str(self.amount))
        if amount <= 0:
            raise ValueError("transaction amounts must be positive")
        object.__setattr__(self, "amount", amount)

    @property
    def signed_amount(self):
        """The amount with a minus sign for money leaving the account."""
        if self.kind in ("withdrawal", "transfer_out"):
            return -self.amount
        return self.amount
