"""The :class:`Matrix` type and its elementary operations."""


class Matrix:
    """An immutable rectangular matrix of numbers stored row by row."""

    def __init__(self, rows):
        rows = [list(row) for row in rows]
        if not rows or not rows[0]:
            raise ValueError("a matrix needs at least one row and one column")
        if any(len(row) != len(rows[0]) for row in rows):
            raise ValueError("all rows must have the same length")
        self._rows = rows

    @classmethod
    def identity(cls, size):
        """Return the ``size`` x ``size`` identity matrix."""
        return cls([[1 if i == j else 0 for j in range(size)] for i in range(size)])

    @property
    def shape(self):
        """``(rows, columns)``."""
        return len(self._rows), len(self._rows[0])

    def to_list(self):
        """Return a copy of the entries as a list of row lists."""
        return [row[:] for row in self._rows]

    def __getitem__(self, index):
        row, col = index
        return self._rows[row][col]

    def __eq__(self, other):
        return isinstance(other, Matrix) and self._rows == other._rows

    def __repr__(self):
        return f"Matrix({self._rows!r})"

    def transpose(self):
        """Return the transposed matrix."""
        return Matrix(zip(*self._rows))

    def __add__(self, other):
        if self.shape != other.shape:
            raise ValueError(f"cannot add shapes {self.shape} and {other.shape}")
        return Matrix(
            [a + b for a, b in zip(left, right)]
            for left, right in zip(self._rows, other._rows)
        )

    def __matmul__(self, other):
        if self.shape[1] != other.shape[0]:
            raise ValueError(f"cannot multiply shapes {self.shape} and {other.shape}")
        columns = list(zip(*other._rows))
        return Matrix(
            [sum(a * b for a, b in zip(row, col)) for col in columns]
            for row in self._rows
        )

    def scale(self, factor):
        """Return the matrix with every entry multiplied by ``factor``."""
        return Matrix([value * factor for value in row] for row in self._rows)
