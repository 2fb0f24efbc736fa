import unittest
from decimal import Decimal

from ledger import Account, InsufficientFunds, Transaction


class AccountTests(unittest.TestCase):
    def test_restore_from_history(self):
        history = [Transaction("deposit", "50"), Transaction("withdrawal", "20.5")]
        self.assertEqual(Account("carol", history).balance, Decimal("29.5"))

    def test_overdraft_is_rejected(self):
        account = Account("dave", [Transaction("deposit", 10)])
        with self.assertRaises(InsufficientFunds):
            account.withdraw(11)

    def test_negative_amounts_are_rejected(self):
        with self.assertRaises(ValueError):
            Transaction("deposit", -5)

    def test_new_accounts_start_empty(self):
        alice = Account("alice")
        alice.deposit(100)
        bob = Account("bob")
        self.assertEqual(bob.balance, Decimal("0"))


if __name__ == "__main__":
    unittest.main()
