import unittest

from matops import Matrix, SingularMatrixError, determinant, inverse, solve


class HiddenMatrixTests(unittest.TestCase):
    def assertMatrixAlmostEqual(self, actual, expected):
        actual = actual.to_list() if isinstance(actual, Matrix) else actual
        self.assertEqual(len(actual), len(expected))
        for got_row, want_row in zip(actual, expected):
            self.assertEqual(len(got_row), len(want_row))
            for got, want in zip(got_row, want_row):
                self.assertAlmostEqual(float(got), want, places=9)

    def test_inverse_with_fractional_entries(self):
        self.assertMatrixAlmostEqual(
            inverse(Matrix([[4, 7], [2, 6]])), [[0.6, -0.7], [-0.2, 0.4]]
        )

    def test_inverse_times_matrix_is_identity(self):
        a = Matrix([[3, 0, 2], [2, 0, -2], [0, 1, 1]])
        self.assertMatrixAlmostEqual(a @ inverse(a), Matrix.identity(3).to_list())

    def test_solve_linear_system(self):
        result = solve(Matrix([[2, 1], [1, 3]]), [3, 5])
        self.assertMatrixAlmostEqual([result], [[0.8, 1.4]])

    def test_unimodular_inverse_exact_values(self):
        a = Matrix([[1, 2, 3], [0, 1, 4], [5, 6, 0]])
        self.assertMatrixAlmostEqual(inverse(a), [[-24, 18, 5], [20, -15, -4], [-5, 4, 1]])

    def test_determinant_and_singular(self):
        self.assertEqual(determinant(Matrix([[4, 7], [2, 6]])), 10)
        with self.assertRaises(SingularMatrixError):
            inverse(Matrix([[1, 2, 3], [2, 4, 6], [0, 1, 1]]))
        with self.assertRaises(ValueError):
            determinant(Matrix([[1, 2, 3], [4, 5, 6]]))

    def test_transpose_and_add(self):
        a = Matrix([[1, 2, 3], [4, 5, 6]])
        self.assertEqual(a.transpose(), Matrix([[1, 4], [2, 5], [3, 6]]))
        self.assertEqual(a + a, a.scale(2))


if __name__ == "__main__":
    unittest.main()
