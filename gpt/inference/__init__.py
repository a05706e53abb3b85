"""gpt.inference: decoding with the KV cache, sampling strategies, streaming and beam search."""
