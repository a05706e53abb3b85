"""The per-step log of a run: the progress line (every step on a terminal) and the metrics
records (every log_interval steps), with throughput averaged over the steps since the last one."""
from __future__ import annotations

import time

from gpt.training.progress import MetricsLog, ProgressLine, format_count


class StepLog:
    def __init__(self, out: ProgressLine, metrics: MetricsLog | None, *, max_steps: int, log_interval: int,
                 tokens_per_step: int, flops_per_step: float, peak: float, ranks: int = 1):
        self.out, self.metrics = out, metrics
        self.max_steps, self.log_interval = max_steps, log_interval
        self.tokens_per_step, self.flops_per_step = tokens_per_step, flops_per_step
        self.peak = peak            # FLOP/s for MFU; the trainer raises it when it measures more
        self.ranks = ranks
        self._since = (time.perf_counter(), 0, 0.0)  # (start, steps, all-reduce seconds) of the window

    def step(self, step: int, loss, norm, lr: float, dt: float, allreduce_s: float = 0.0) -> None:
        """Log optimizer step `step` that took `dt` seconds (`allreduce_s` of them in all-reduces).
        loss and norm are floats, or device arrays on the steps a GPU run does not read (those
        are counted in the averages but neither printed nor written)."""
        read = isinstance(loss, float)
        if read and (self.out.tty or step % self.log_interval == 0):
            self.out.update(
                f"step {step:>6}/{self.max_steps}  loss {loss:.4f}  lr {lr:.2e}  "
                f"{format_count(self.tokens_per_step / dt)} tok/s  {dt * 1e3:.0f} ms/step  "
                f"MFU {self.flops_per_step / dt / self.peak:.1%}"  # per rank: its own share of the work
                + (f"  all-reduce {allreduce_s * 1e3:.1f} ms" if self.ranks > 1 else ""))
        start, steps, ar = self._since
        steps, ar = steps + 1, ar + allreduce_s
        self._since = (start, steps, ar)
        if read and self.metrics and (step % self.log_interval == 0 or step == self.max_steps):
            now = time.perf_counter()
            avg = (now - start) / steps
            record = {"kind": "train", "step": step, "loss": loss, "lr": lr, "grad_norm": norm,
                      "ms_per_step": avg * 1e3, "tokens_per_s": self.tokens_per_step / avg,
                      "mfu": self.flops_per_step / avg / self.peak, "time": time.time()}
            if self.ranks > 1:
                record["allreduce_ms"] = ar * 1e3 / steps
            self.metrics.write(record)
            self._since = (now, 0, 0.0)
