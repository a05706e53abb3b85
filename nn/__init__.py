"""nn: modules, transformer layers, positions, initialisation, optimizers and checkpoints on autograd.

    from nn import Module, Linear, LayerNorm, MultiHeadAttention
    from nn.optim import AdamW, warmup_cosine, clip_grad_norm
    from nn.checkpoint import save_safetensors, load_safetensors
"""
from nn.module import Module, Parameter  # noqa: F401
from nn.containers import ModuleList, ModuleDict, Sequential  # noqa: F401
from nn.linear import Linear, laid_out, step_layouts  # noqa: F401
from nn.embedding import Embedding  # noqa: F401
from nn.norm import LayerNorm, RMSNorm  # noqa: F401
from nn.activation import GELU, ReLU, SiLU, Tanh, activation  # noqa: F401
from nn.dropout import Dropout  # noqa: F401
from nn.mlp import MLP, SwiGLU, swiglu_hidden  # noqa: F401
from nn.moe import MoE  # noqa: F401
from nn.attention import MultiHeadAttention, KVCache  # noqa: F401
from nn.positions import LearnedPositions, SinusoidalPositions, RotaryEmbedding, sinusoidal_table  # noqa: F401
from nn.transformer import (  # noqa: F401
    Transformer, TransformerEncoder, TransformerDecoder, TransformerEncoderLayer, TransformerDecoderLayer,
)
from nn.cross_attention import CrossAttention  # noqa: F401
from nn.patch import PatchEmbedding  # noqa: F401
from nn import init, optim, checkpoint  # noqa: F401
