"""Pre-tokenization, shared by training and encoding: split patterns and the chunks they find."""
