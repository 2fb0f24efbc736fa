"""Determinants, inverses and linear systems for small square matrices."""

from .matrix import Matrix


class SingularMatrixError(ValueError):
    """Raised when a matrix has no inverse."""


def _require_square(matrix):
    rows, cols = matrix.shape
    if rows != cols:
        raise ValueError(f"expected a square matrix, got shape {matrix.shape}")
    return rows


def _minor(rows, skip_row, skip_col):
    return [
        [value for c, value in enumerate(row) if c != skip_col]
        for r, row in enumerate(rows)
        if r != skip_row
    ]


def _det(rows):
    if len(rows) == 1:
        return rows[0][0]
    return sum(
        (-1) ** col * rows[0][col] * _det(_minor(rows, 0, col))
        for col in range(len(rows))
    )


def determinant(matrix):
    """Return the determinant of a square matrix (cofactor expansion)."""
    _require_square(matrix)
    return _det(matrix.to_list())


def inverse(matrix):
    """Return the inverse of a square matrix as a new :class:`Matrix`.

    Uses the adjugate formula ``A^-1 = adj(A) / det(A)``, which is exact for
    integer matrices whose determinant is 1 or -1 and otherwise produces
    floats.  Raises :class:`SingularMatrixError` when ``det(A) == 0``.
    """
    size = _require_square(matrix)
    rows = matrix.to_list()
    det = _det(rows)
    if det == 0:
        raise SingularMatrixError("matrix is singular")
    if size == 1:
        return Matrix([[1 / det]])
    return Matrix(
        [(-1) ** (i + j) * _det(_minor(rows, j, i)) / det for j in range(size)]
        for i in range(size)
    )


def solve(matrix, rhs):
    """Solve ``matrix @ x = rhs`` for the vector ``x`` (a list of numbers)."""
    size = _require_square(matrix)
    if len(rhs) != size:
        raise ValueError(f"right-hand side must have {size} entries")
    column = Matrix([value] for value in rhs)
    return [row[0] for row in (inverse(matrix) @ column).to_list()]
