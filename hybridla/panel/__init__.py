"""Panel factorizations on the CPU, through scipy's LAPACK."""
