"""gpt: the GPT model (config, layers, presets), and the tools around it."""
from gpt.config import GPTConfig  # noqa: F401
from gpt.model import GPT  # noqa: F401
