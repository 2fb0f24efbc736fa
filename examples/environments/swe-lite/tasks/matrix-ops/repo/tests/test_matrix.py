import unittest

from matops import Matrix, SingularMatrixError, determinant, inverse


class MatrixTests(unittest.TestCase):
    def test_product_with_identity(self):
        a = Matrix([[1, 2], [3, 4]])
        self.assertEqual(a @ Matrix.identity(2), a)

    def test_determinant(self):
        self.assertEqual(determinant(Matrix([[2, 0, 1], [1, 3, 2], [1, 1, 2]])), 6)

    def test_inverse_of_unimodular_matrix(self):
        self.assertEqual(inverse(Matrix([[2, 1], [1, 1]])), Matrix([[1, -1], [-1, 2]]))

    def test_singular_matrix(self):
        with self.assertRaises(SingularMatrixError):
            inverse(Matrix([[1, 2], [2, 4]]))


if __name__ == "__main__":
    unittest.main()
