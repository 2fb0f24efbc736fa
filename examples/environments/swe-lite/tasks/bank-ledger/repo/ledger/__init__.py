"""ledger: minimal bank accounts backed by an append-only transaction list."""

from .account import Account, InsufficientFunds
from .statement import statement_lines
from .transaction import Transaction

__all__ = ["Account", "InsufficientFunds", "Transaction", "statement_lines"]
