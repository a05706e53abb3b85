"""bpe package."""
