import unittest
from decimal import Decimal

from ledger import Account, InsufficientFunds, Transaction, statement_lines


class HiddenLedgerTests(unittest.TestCase):
    def test_fresh_accounts_do_not_share_history(self):
        first = Account("first")
        first.deposit(25)
        second = Account("second")
        self.assertEqual(second.transactions, [])
        self.assertEqual(first.balance, Decimal("25"))

    def test_transfer_between_new_accounts(self):
        alice = Account("alice")
        bob = Account("bob")
        alice.deposit(100)
        alice.transfer_to(bob, 40)
        self.assertEqual(alice.balance, Decimal("60"))
        self.assertEqual(bob.balance, Decimal("40"))

    def test_new_account_cannot_withdraw(self):
        rich = Account("rich")
        rich.deposit(1000)
        poor = Account("poor")
        with self.assertRaises(InsufficientFunds):
            poor.withdraw(1)

    def test_restored_account_balance(self):
        history = [
            Transaction("deposit", "10.10"),
            Transaction("transfer_in", "5"),
            Transaction("transfer_out", "2.10"),
        ]
        self.assertEqual(Account("eve", history).balance, Decimal("13.00"))

    def test_statement_of_restored_account(self):
        account = Account("frank", [Transaction("deposit", 20, "salary")])
        account.withdraw(5)
        lines = statement_lines(account)
        self.assertEqual(lines[0], "Statement for frank")
        self.assertEqual(lines[-1], "Closing balance: 15.00")
        self.assertEqual(len(lines), 4)

    def test_invalid_transactions(self):
        with self.assertRaises(ValueError):
            Transaction("refund", 5)
        with self.assertRaises(ValueError):
            Transaction("deposit", 0)


if __name__ == "__main__":
    unittest.main()
