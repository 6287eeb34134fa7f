"""What every stage shares: the exception family, printable text, interval algebra, the vocabulary tables."""
