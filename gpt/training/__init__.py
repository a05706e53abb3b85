"""gpt.training: the training loop, its settings, checkpoints, progress, evaluation and data parallelism."""
