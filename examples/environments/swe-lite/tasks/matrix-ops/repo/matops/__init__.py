"""matops: small dense matrices in pure Python."""

from .linalg import SingularMatrixError, determinant, inverse, solve
from .matrix import Matrix

__all__ = ["Matrix", "SingularMatrixError", "determinant", "inverse", "solve"]
