"""The model families the gradient study measures besides the GPT: their models, data and losses.

    seq2seq   the 2017 translator (gpt.seq2seq.model.Seq2Seq: nn.Transformer, post-norm by
              default, ReLU, sinusoids, shared embeddings tied to the output) on the generated
              number-translation batches; depth L = L encoder + L decoder layers
    encoder   the encoder-only model (EncoderOnly) on masked-token batches; L encoder layers
    vit       the Vision Transformer (gpt.vision.model.ViT: patch 2, GELU) on the procedural 8x8
              digits (gpt.vision.data.synthetic), its classification loss; L encoder layers

A variant here sets only where the norm sits (norm_first = pre); nn.Transformer's layers always
add their residuals and use LayerNorm with one key/value head per query head, so other words
are refused. Width C = n_embd, heads = n_head, feed-forward 4C, dropout 0.

Measured: one forward and backward on a fixed batch (MEASURE_BATCH_SEED): the translation loss,
or for the encoder-only model its masked-token loss (one pass, so each layer is recorded once).
Training steps (`steps` > 0) use the model's own losses: translation, or masked tokens plus
the true/false pair classification.
"""
from __future__ import annotations

import numpy as np

FAMILIES = ("gpt", "seq2seq", "encoder", "vit")
STACK_FAMILIES = FAMILIES[1:]
VIT_PATCH = 2  # 8x8 images in 2x2 patches: 16 patches and a class token


def check_variant(family: str, variant) -> None:
    """A clear error for a variant word nn.Transformer's layers cannot express."""
    if family not in STACK_FAMILIES:
        return
    bad = [w for w, off in (("nores", not variant.residual), ("rms", variant.norm != "layernorm"),
                            (f"kv{variant.n_kv_head}", variant.n_kv_head is not None)) if off]
    if bad:
        raise ValueError(f"variant {variant.name!r}: the {family} family's nn.Transformer layers always add "
                         f"residuals and use LayerNorm with full attention heads, so {', '.join(bad)} "
                         "is not available there (only pre / post)")


def build(family: str, spec, variant, depth: int, seed: int):
    """A fresh model of `family` at `depth` from autograd.manual_seed(seed), on spec.device."""
    import autograd
    from gpt.seq2seq import data as D
    from gpt.seq2seq.model import EncoderOnly, Seq2Seq, Seq2SeqConfig

    check_variant(family, variant)
    if family == "vit":
        from gpt.vision.model import ViT, ViTConfig

        autograd.manual_seed(seed)
        model = ViT(ViTConfig(patch_size=VIT_PATCH, d_model=spec.n_embd, nhead=spec.n_head, num_layers=depth,
                              dim_feedforward=4 * spec.n_embd, norm_first=variant.prenorm))
        return model.to(spec.device) if spec.device != "cpu" else model
    cfg = Seq2SeqConfig(vocab_size=len(D.VOCAB), d_model=spec.n_embd, nhead=spec.n_head,
                        num_encoder_layers=depth, num_decoder_layers=depth, dim_feedforward=4 * spec.n_embd,
                        dropout=0.0, activation="relu", norm_first=variant.prenorm, pad_id=D.PAD)
    autograd.manual_seed(seed)
    model = (Seq2Seq if family == "seq2seq" else EncoderOnly)(cfg)
    return model.to(spec.device) if spec.device != "cpu" else model


def measure_forward(family: str, batch_size: int, seed: int):
    """forward(model) -> the loss measured (one pass through each stack), on a batch fixed by `seed`."""
    import autograd
    from autograd import backend
    from gpt.seq2seq import data as D

    rng = np.random.default_rng(seed)
    if family == "vit":
        x, y = _image_batch(rng, batch_size)
        return lambda model: model(x, y)[1]
    if family == "seq2seq":
        b = D.translation_batch(rng, batch_size)
        return lambda model: model(b.src, b.tgt_in, b.targets)[1]
    ids, targets = D.mlm_batch(rng, batch_size)
    return lambda model: autograd.cross_entropy(model(ids)[0], backend.to_device(targets, model.device))


def training_loss(family: str, batch_size: int):
    """loss_of(model, rng) -> the loss of one fresh training batch (the model's own objective)."""
    from gpt.seq2seq import data as D

    def loss_of(model, rng):
        if family == "vit":
            return model(*_image_batch(rng, batch_size))[1]
        if family == "seq2seq":
            b = D.translation_batch(rng, batch_size)
            return model(b.src, b.tgt_in, b.targets)[1]
        mlm, cls = model.losses(*D.mlm_batch(rng, batch_size), *D.pair_batch(rng, batch_size))
        return mlm + cls

    return loss_of


def jacobian_forward(family: str, tokens: int, seed: int):
    """forward(model) on one example whose first `tokens` positions hold no padding (sources and
    targets cut there), for stacks.stack_block_spectra."""
    from gpt.seq2seq import data as D

    rng = np.random.default_rng(seed)
    if family == "vit":  # the class token and the first tokens - 1 patches of one image
        _check_vit_tokens(tokens)
        x, _ = _image_batch(rng, 1)
        return lambda model: model.encoder(model.embed(x)[:, :tokens])
    for _ in range(100):
        if family == "seq2seq":
            b = D.translation_batch(rng, 16)
            ok = np.flatnonzero(((b.src != D.PAD).sum(1) >= tokens) & ((b.tgt_in != D.PAD).sum(1) >= tokens))
            if ok.size:
                i = int(ok[0])
                src, tgt = b.src[i:i + 1, :tokens], b.tgt_in[i:i + 1, :tokens]
                return lambda model: model(src, tgt)
        else:
            ids, _ = D.mlm_batch(rng, 16)
            ok = np.flatnonzero((ids != D.PAD).sum(1) >= tokens)
            if ok.size:
                row = ids[int(ok[0]):int(ok[0]) + 1, :tokens]
                return lambda model: model(row)
    raise ValueError(f"no {family} example has {tokens} tokens; use fewer --jacobian-tokens")


def _image_batch(rng, batch_size: int):
    """(images (B, 1, 8, 8), labels (B,)) drawn by `rng` from the procedural digits' train split."""
    from gpt.vision.data import synthetic

    images = synthetic(seed=0)
    idx = rng.integers(0, len(images.train_y), batch_size)
    return images.train_x[idx], images.train_y[idx]


def _check_vit_tokens(tokens: int) -> None:
    """Refuse more tokens than a vit example has (the class token and the patches)."""
    from gpt.vision.model import ViTConfig

    n = 1 + ViTConfig(patch_size=VIT_PATCH).num_patches
    if tokens > n:
        raise ValueError(f"a vit example has {n} tokens (class token + patches), fewer than {tokens}; "
                         "use fewer --jacobian-tokens")
