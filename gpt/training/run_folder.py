"""A run folder: every file a training run writes, behind one object.

    config.json       the settings, the model config and the data folder used (gpt.training.build.data_dir_record)
    tokenizer.json    the tokenizer of the data
    metrics.jsonl     one JSON object per log step and per evaluation
    latest.safetensors, best.safetensors   checkpoints (gpt.training.checkpoint)
    summary.json      written at the end
    .lock             held while a process writes the folder (bpe.files.lock.FolderLock)

A run opens a new folder, an empty one or a run's own, never a data folder or another folder
holding files of those names that no run wrote (`RunFolder._check_not_foreign`).

The run also holds a reader's lock on its data folder until it closes (`read_data`), so that
`gpt prepare` cannot replace the data under it.

Every file is written atomically; a checkpoint write that fails (a full disk) leaves the
previous checkpoint in place and says so in one line.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from bpe.files.atomic import atomic_write_text
from bpe.files.lock import FolderLock
from gpt.data.fingerprint import fingerprint
from gpt.data.folder import META_FILE, NANOGPT_META, SPLITS, read_meta
from gpt.files import WriteFailed
from gpt.training.checkpoint import BEST, LATEST, save_checkpoint
from gpt.training.progress import MetricsLog

CONFIG, TOKENIZER, METRICS, SUMMARY = "config.json", "tokenizer.json", "metrics.jsonl", "summary.json"
# Beside config.json, the files a run writes that could be someone else's; checkpoints are left
# out, so that a folder holding only a copied checkpoint still resumes.
RUN_FILES = (TOKENIZER, METRICS, SUMMARY)
# A data folder's own files (gpt.data.folder): a run never writes them, and must not write among them.
DATA_FILES = (META_FILE, NANOGPT_META, *(f"{split}.bin" for split in SPLITS))


def new_run_path(root: str | os.PathLike) -> Path:
    """`root/<date-time>`, with a suffix when that folder exists already."""
    base = Path(root) / time.strftime("%Y%m%d-%H%M%S")
    p, i = base, 1
    while p.exists():
        p, i = Path(f"{base}-{i}"), i + 1
    return p


class RunFolder:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.created = False  # whether this process made the folder (then it may remove it)
        self.locked = False
        self._lock = FolderLock(self.path, "run folder")
        self._data_locks: list[FolderLock] = []

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def open(self) -> "RunFolder":
        """Create the folder when needed and take its lock (refused while another process writes,
        and where the folder is not a run's: see _check_not_foreign)."""
        self.created = self._make()
        self._check_not_foreign()
        self._lock.acquire()
        self.locked = True
        self._remove_orphans()
        return self

    def _make(self) -> bool:
        """Make the folder -> whether this process made it: decided by one mkdir, so that of two
        runs opening a new folder together only one thinks it made it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.mkdir()
        except (FileExistsError, NotADirectoryError):  # there already, or a file in the way (the lock names it)
            return False
        return True

    def close(self) -> None:
        self._lock.release()
        self.locked = False
        while self._data_locks:
            self._data_locks.pop().release()

    def discard(self) -> None:
        """Close, removing the folder when this process made it and holds its lock: a run that
        could not start leaves no empty folder, and never removes one that another run won."""
        if self.created and self.locked:
            shutil.rmtree(self.path, ignore_errors=True)  # still under the lock: no other run is inside
        self.close()

    def read_data(self, data_dir: str | os.PathLike) -> tuple[dict, dict]:
        """(meta, fingerprint) of the data folder (gpt.data.folder.read_meta, gpt.data.fingerprint),
        read under a reader's lock that this run holds until `close`."""
        if Path(data_dir).is_dir():
            lock = FolderLock(data_dir, "data folder", shared=True)
            try:
                self._data_locks.append(lock.acquire())
            except OSError:  # a read-only folder: no `gpt prepare` can rewrite it either
                pass
        meta = read_meta(data_dir)
        return meta, fingerprint(data_dir, meta.get("tokenizer_path"))

    def _check_not_foreign(self) -> None:
        """Refuse a folder that is not a run's, whose files a run would overwrite or mix with its
        own: a data folder; a folder whose config.json no run wrote (every run's holds its model's
        config under "model"): a model folder, say; a folder holding a run's files but no config.json."""
        data = self._holds(DATA_FILES)
        if data:
            raise FileExistsError(f"{str(self.path)!r} is a data folder (it holds {data}), not a run folder: a run's "
                                  "files would mix with the data's (its tokenizer.json over theirs); choose another folder")
        config = self.path / CONFIG
        if not config.is_file():
            held = self._holds(RUN_FILES)
            if held:
                raise FileExistsError(f"{str(self.path)!r} holds {held} but no run's config.json: they are not a "
                                      "run's, and a run would overwrite them; choose another folder")
            return
        try:
            info = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            info = None
        ours = isinstance(info, dict) and "model" in info
        if not ours:
            raise FileExistsError(f"{str(self.path)!r} holds a config.json that no run wrote (a Hugging Face "
                                  "model folder?), which a run would overwrite; choose another folder")

    def _holds(self, names: tuple[str, ...]) -> str:
        """Those of `names` that the folder holds, comma-separated ("" for none)."""
        return ", ".join(n for n in names if (self.path / n).exists())

    def _remove_orphans(self) -> None:
        """Temp files of writes that a killed process never finished (we hold the lock: no live
        writer owns them)."""
        for p in self.path.glob(".*.tmp"):
            try:
                p.unlink()
            except OSError:
                pass

    # ---- the files ----------------------------------------------------------------------
    def write_config(self, info: dict) -> None:
        atomic_write_text(self.path / CONFIG, json.dumps(info, indent=2))

    def write_tokenizer(self, text: str) -> None:
        atomic_write_text(self.path / TOKENIZER, text)

    def write_summary(self, summary: dict) -> None:
        atomic_write_text(self.path / SUMMARY, json.dumps(summary, indent=2))

    def metrics(self, resume_step: int | None) -> MetricsLog:
        return MetricsLog(self.path / METRICS, resume_step=resume_step)

    def save_checkpoint(self, name: str, weights: dict, optimizer_state: Any, meta: dict) -> Path:
        path = self.path / name
        try:
            save_checkpoint(path, weights, optimizer_state, meta)
        except OSError as exc:
            kept = f"{path} from before is kept" if path.exists() else f"no {name} was written"
            raise WriteFailed(f"could not save the checkpoint of step {meta.get('step')} to "
                                  f"{path}: {exc.strerror or exc}; {kept}") from None
        return path

    def describe_kept(self, last_good_step: int | None, best_step: int | None, best_val: float) -> str:
        """Which checkpoints a stopped run can go back to, and the --resume that does it."""
        latest = self.path / LATEST
        if last_good_step is None and not (self.path / BEST).exists():
            return "no checkpoint was written yet. Try a lower --lr, a longer --warmup-steps or --grad-clip"
        parts = []
        if last_good_step is not None:
            parts.append(f"the last good checkpoint is kept: {latest} (step {last_good_step})")
        if best_step is not None and (self.path / BEST).exists():
            parts.append(f"the best is {self.path / BEST} (step {best_step}, val loss {best_val:.4f})")
        return ("; ".join(parts) + ". Try a lower --lr, a longer --warmup-steps or --grad-clip, then "
                f"--resume {self.path / (BEST if best_step is not None else LATEST)}")
