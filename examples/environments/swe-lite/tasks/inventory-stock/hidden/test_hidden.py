import unittest

from stockroom import InsufficientStock, Inventory, low_stock


def make_inventory():
    inv = Inventory()
    inv.add_item("MUG-1", "Coffee mug", on_hand=10)
    inv.add_item("TEA-2", "Teapot", on_hand=2)
    return inv


class HiddenInventoryTests(unittest.TestCase):
    def test_release_makes_units_available_again(self):
        inv = make_inventory()
        inv.reserve("MUG-1", 4)
        inv.release("MUG-1", 4)
        self.assertEqual(inv.available("MUG-1"), 10)
        self.assertEqual(inv.reserved("MUG-1"), 0)

    def test_release_does_not_change_on_hand(self):
        inv = make_inventory()
        inv.reserve("MUG-1", 5)
        inv.release("MUG-1", 2)
        self.assertEqual(inv.on_hand("MUG-1"), 10)
        self.assertEqual(inv.available("MUG-1"), 7)

    def test_cancelled_units_can_be_reserved_again(self):
        inv = make_inventory()
        inv.reserve("TEA-2", 2)
        inv.release("TEA-2", 2)
        inv.reserve("TEA-2", 2)
        inv.ship("TEA-2", 2)
        self.assertEqual((inv.on_hand("TEA-2"), inv.available("TEA-2")), (0, 0))

    def test_cannot_release_more_than_reserved(self):
        inv = make_inventory()
        inv.reserve("MUG-1", 1)
        with self.assertRaises(InsufficientStock):
            inv.release("MUG-1", 2)

    def test_low_stock_uses_available(self):
        inv = make_inventory()
        inv.reserve("MUG-1", 9)
        self.assertEqual(low_stock(inv, 2), ["MUG-1", "TEA-2"])
        inv.restock("MUG-1", 5)
        self.assertEqual(low_stock(inv, 2), ["TEA-2"])

    def test_invalid_quantities(self):
        inv = make_inventory()
        for bad in (0, -1, 1.5):
            with self.assertRaises(ValueError):
                inv.reserve("MUG-1", bad)


if __name__ == "__main__":
    unittest.main()
