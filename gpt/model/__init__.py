"""gpt.model: the configuration, the blocks and the GPT itself, and its size report."""
