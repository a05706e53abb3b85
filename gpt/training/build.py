"""What a run is built from its settings: its data folder, the model with its optimizer, and
the batches. Free functions, so a script can build a run's pieces without the Trainer."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from gpt.data.folder import META_FILE
from gpt.data.loader import BatchLoader, fixed_batches
from gpt.training.config import MODEL_KEYS, TrainConfig

RUN_DATA = "data"  # where --input is prepared, inside the run folder


def data_dir_record(data_dir: str | Path, run_dir: str | Path) -> str:
    """The data folder as a checkpoint and config.json record it: relative to the run folder when
    it lies inside it (so the run can be moved or copied with its data), else absolute."""
    data, run = Path(data_dir).resolve(), Path(run_dir).resolve()
    return data.relative_to(run).as_posix() if data.is_relative_to(run) else str(data)


def saved_data_dir(meta: dict) -> str | None:
    """The data folder of a checkpoint (its meta, as gpt.training.checkpoint loads it: "path" is
    the checkpoint's file), found again after the run folder moved: a relative record is the run
    folder's; a folder that is gone is replaced by the run's own prepared data, if any (the data
    fingerprint then checks it is the same data). None where the checkpoint names none."""
    saved = meta.get("data_dir")
    if not isinstance(saved, str) or not saved:
        return None
    run_dir = Path(meta["path"]).parent
    found = run_dir / saved  # an absolute record stays itself
    if not found.is_dir() and (run_dir / RUN_DATA / META_FILE).is_file():
        found = run_dir / RUN_DATA
    return str(found)


def data_folder(cfg: TrainConfig, resumed: str | None, run_dir: Path, runs_root: str,
                say: Callable[[str], None]) -> Path:
    """The data folder to train on: a resumed run's (resumed: saved_data_dir of its checkpoint),
    --data, --input prepared into the run folder, or the default corpus (prepared once under
    runs_root, then cached)."""
    if isinstance(resumed, str) and Path(resumed).is_dir():
        return Path(resumed)
    if cfg.data:
        return Path(cfg.data)
    if cfg.input:
        from gpt.data import prepare

        d = run_dir / RUN_DATA
        say(f"data: tokenizing {len(cfg.input)} input path(s) into {d}")
        prepare(cfg.input, d, tokenizer=cfg.tokenizer, vocab_size=cfg.vocab_size, char=cfg.char,
                val_fraction=cfg.val_fraction, workers=cfg.workers, max_chars=cfg.max_chars,
                tokenizer_max_chars=cfg.max_chars, verbose=True)
        return d
    from gpt.data.corpus import default_data_dir

    return default_data_dir(runs_root, cfg.vocab_size, char=cfg.char, max_chars=cfg.max_chars,
                            val_fraction=cfg.val_fraction, workers=cfg.workers)


def build_model(cfg: TrainConfig, vocab_size: int, dist=None, data_tokenizer=None,
                explicit: frozenset = frozenset()) -> tuple[Any, Any, Any, Any]:
    """(GPTConfig, GPT in train mode on cfg.device, mixed-precision wrapper or None, AdamW).
    data_tokenizer: the tokenizer of the data, which --init-from's model must share; explicit:
    the settings the user gave (the others yield to --init-from's model)."""
    from autograd import keep_freed_memory, manual_seed
    from autograd.threads import apply_threads
    from gpt.model.gpt import GPT
    from nn.amp import configure
    from nn.optim import AdamW, weight_decay_groups

    check = lambda: model_config(cfg, vocab_size, data_tokenizer, explicit)  # noqa: E731
    # before the first collective, so that every rank meeting the same error reports it once
    model_cfg, init_state = check() if dist is None else dist.run_on_all(check, "check of the model")
    keep_freed_memory()  # a step frees and re-allocates the same large buffers: no page faults
    if cfg.device == "cpu":  # pool and BLAS threads from the free cores, or $GPT_THREADS
        apply_threads(ranks=dist.world_size if dist is not None else 1)
    manual_seed(cfg.seed)
    model = GPT(model_cfg)
    if init_state is not None:
        model.load_state_dict(init_state)
    if cfg.device != "cpu":
        model.to(cfg.device)
    if dist is not None:  # the same seed gives the same weights; rank 0's are the rule
        dist.broadcast_arrays(p.data for p in model.parameters())
        share_expert_load(model, dist)
    model.train()
    amp = configure(model, cfg.precision, cfg.device)  # fp16: float32 master weights
    # nanoGPT's rule: every parameter of 2 or more dimensions decays, the token and position
    # tables included; biases and norm gains do not
    groups = weight_decay_groups(model, cfg.weight_decay, decay_embeddings=True)
    optimizer = AdamW(amp.master_groups(groups) if amp else groups, lr=cfg.lr,
                      betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=cfg.weight_decay)
    return model_cfg, model, amp, optimizer


def model_config(cfg: TrainConfig, vocab_size: int, data_tokenizer=None, explicit: frozenset = frozenset()):
    """(GPTConfig, --init-from's state_dict or None) of the run, checked to fit in memory."""
    from gpt.model.config import GPTConfig

    init_state = None
    if cfg.init_from:  # fine-tuning: the model is the pretrained one, only dropout changes
        model_cfg, init_state = init_model(cfg, vocab_size, data_tokenizer, explicit)
    else:
        model_cfg = GPTConfig.from_dict(cfg.model_dict(vocab_size))
    check_step_fits(cfg, model_cfg)
    return model_cfg, init_state


def share_expert_load(model, dist) -> None:
    """Let every MoE layer count its experts' load over all ranks (nn.MoE.sum_counts), so that its
    load-balancing loss is the global batch's, as one process with that batch would compute it."""
    from nn.moe import MoE

    for m in model.modules():
        if isinstance(m, MoE):
            m.sum_counts = dist.sum_counts


def step_bytes(cfg: TrainConfig, model_cfg) -> int:
    """A lower bound of the bytes a training step holds at once (float32): weights, gradients and
    AdamW's two moments; the logits; each layer's activations (a dozen vectors of n_embd per
    token, the attention probabilities once); the batches of ids."""
    B, T, L = cfg.batch_size, cfg.block_size, model_cfg.n_layer
    per_token = model_cfg.vocab_size + L * (12 * model_cfg.n_embd + model_cfg.n_head * T)
    ids = (1 + 2 * cfg.eval_batches) * B * T * 2 * 8  # x and y, int64, for training and evaluation
    return 16 * model_cfg.count_params() + 4 * B * T * per_token + ids


def check_step_fits(cfg: TrainConfig, model_cfg) -> None:
    """Refuse, in one line, a run whose step cannot fit in the memory of its device."""
    from autograd.memory import check_fits

    check_fits(step_bytes(cfg, model_cfg), f"a training step of --batch-size {cfg.batch_size} x "
               f"--block-size {cfg.block_size} on this model", "lower --batch-size (and raise "
               "--grad-accum to keep the tokens per step) or --block-size", cfg.device)


def init_model(cfg: TrainConfig, vocab_size: int, data_tokenizer=None, explicit: frozenset = frozenset()):
    """(GPTConfig, state_dict) of --init-from, checked against the data (its vocabulary and
    tokenizer: ids must mean the same text), the block size and the model settings given (the
    model's shape is its own). A block size not given is at most the model's context (cfg's is
    shortened to it)."""
    from gpt.data.folder import describe_tokenizer, same_ids
    from gpt.pretrained import load_init

    model_cfg, state, model_tok = load_init(cfg.init_from)
    if not same_ids(model_tok, data_tokenizer):
        raise ValueError(f"the data was written by {describe_tokenizer(data_tokenizer, 'the data folder')} and the "
                         f"--init-from model reads {describe_tokenizer(model_tok, cfg.init_from)}: their ids "
                         "mean different text; prepare the data with the model's own tokenizer "
                         f"(gpt prepare --tokenizer {cfg.init_from})")
    if vocab_size > model_cfg.vocab_size:
        raise ValueError(f"the data's vocabulary has {vocab_size} ids but the --init-from model only "
                         f"{model_cfg.vocab_size}: prepare the data with the model's own tokenizer")
    own = model_cfg.to_dict()
    differ = [k for k in MODEL_KEYS if k in explicit and k not in ("vocab_size", "block_size", "dropout")
              and k in own and getattr(cfg, k) != own[k]]
    if differ:
        k = differ[0]
        raise ValueError(f"--{k.replace('_', '-')} {getattr(cfg, k)} differs from the --init-from model's "
                         f"{own[k]}: the model's shape is its own; leave it out")
    if cfg.block_size > model_cfg.block_size:
        if "block_size" in explicit:
            raise ValueError(f"--block-size {cfg.block_size} exceeds the --init-from model's context of "
                             f"{model_cfg.block_size}: pass --block-size {model_cfg.block_size} or less")
        cfg.block_size = model_cfg.block_size  # the default, where the model's context is shorter
    return model_cfg.replace(dropout=cfg.dropout), state


def build_batches(cfg: TrainConfig, train_tokens: np.ndarray, val_tokens: np.ndarray, dist=None):
    """(the training BatchLoader, {"train": fixed batches, "val": fixed batches}), each rank
    reading its shard of every global batch."""
    T, B = cfg.block_size, cfg.batch_size
    shard = (dist.rank, dist.world_size) if dist is not None else (0, 1)
    loader = BatchLoader(train_tokens, B, T, seed=cfg.seed, device=cfg.device, name="train", shard=shard)
    eval_sets = {
        split: fixed_batches(tokens, cfg.eval_batches, B, T, seed=cfg.seed + k, device=cfg.device,
                             name=split, shard=shard)
        for k, (split, tokens) in enumerate((("train", train_tokens), ("val", val_tokens)), 1)
    }
    return loader, eval_sets
