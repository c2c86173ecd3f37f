"""The permuted scale layout of the NVFP4 problems, (32, 4, rest_mn, 4, rest_k, l), for the judge.

Every problem's reference.py defines the same layout for itself (a runner folder imports nothing
of the harness); this is the judge's own copy, which a scale edit writes through
(ScaleTwins.permuted_index). tests/test_problem_folders.py holds every copy to the same text.
"""

# The permuted scale layout (32, 4, rest_mn, 4, rest_k, l) groups 128 rows x 4 scale columns
# into one 512-byte atom, the unit the tensor cores' scale-factor loads consume.
ATOM_ROWS_INNER = 32
ATOM_ROWS_OUTER = 4
ATOM_ROWS = ATOM_ROWS_INNER * ATOM_ROWS_OUTER
ATOM_SF_COLS = 4


def permuted_index(row, col, batch) -> tuple:
    """Where the plain scale (row, col, batch) sits in the (32, 4, rest_mn, 4, rest_k, l) layout
    (integers or index tensors alike)."""
    return (row % ATOM_ROWS_INNER, (row % ATOM_ROWS) // ATOM_ROWS_INNER, row // ATOM_ROWS,
            col % ATOM_SF_COLS, col // ATOM_SF_COLS, batch)
