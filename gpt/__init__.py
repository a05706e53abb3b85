"""gpt: the GPT model (config, layers, presets), and the tools around it."""
from gpt.model.config import GPTConfig  # noqa: F401
from gpt.model.gpt import GPT  # noqa: F401
