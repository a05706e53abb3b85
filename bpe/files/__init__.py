"""What bpe reads and writes: training inputs, tokenizer formats, atomic writes."""
