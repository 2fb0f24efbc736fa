import unittest

from stockroom import InsufficientStock, Inventory, UnknownItem


class InventoryTests(unittest.TestCase):
    def setUp(self):
        self.inv = Inventory()
        self.inv.add_item("MUG-1", "Coffee mug", on_hand=10)

    def test_reserve_reduces_available(self):
        self.inv.reserve("MUG-1", 3)
        self.assertEqual(self.inv.available("MUG-1"), 7)
        self.assertEqual(self.inv.on_hand("MUG-1"), 10)

    def test_cannot_reserve_more_than_available(self):
        with self.assertRaises(InsufficientStock):
            self.inv.reserve("MUG-1", 11)

    def test_ship_reserved_units(self):
        self.inv.reserve("MUG-1", 4)
        self.inv.ship("MUG-1", 4)
        self.assertEqual((self.inv.on_hand("MUG-1"), self.inv.reserved("MUG-1")), (6, 0))

    def test_unknown_sku(self):
        with self.assertRaises(UnknownItem):
            self.inv.restock("NOPE", 1)


if __name__ == "__main__":
    unittest.main()
