"""Causal attention on the GPU: a tiled FlashAttention-style forward and backward, and the
matmul-softmax-matmul path with its masking and softmax fused into one kernel each way.

Reference: ScaledDotProductAttention in autograd/ops/attention.py (same shapes, same bottom-right
causal alignment: query i sees key j iff j <= i + Tk - Tq; a query with no visible key outputs 0).

Flash (no (Tq, Tk) matrix is ever stored). Per head, queries are cut into tiles of TILE rows;
each row is owned by SPLIT threads that hold HS/SPLIT of its dimensions in registers (dims
d*SPLIT + h for thread h, so the SPLIT threads of a row read neighbouring shared-memory banks)
and add up partial dot products with warp shuffles. Keys and values stream through shared
memory in tiles; the softmax is online (running max m and sum l, rescaling the accumulator),
in chunks of KC keys. The forward saves the output and L = m + log(l) per query row (float32).
Backward (with D = rowsum(dO * O)), recomputing P = exp(S - L) tile by tile:
    dq kernel (one row per query):   dS = P * (dO v^T - D),  dq = scale * dS k
    dkdv kernel (one row per key):   dv = P^T dO,            dk = scale * dS^T q
Supported: float16/float32, head size 32, 64 or 128, no attn_mask, no dropout; anything else
takes the matmul path or the plain array op.
"""
from __future__ import annotations

import math

import numpy as np

from autograd.backend import acc_dtype, xp_of
from autograd.cuda import attention_mode
from autograd.cuda._compile import block_size_for, dtype_name, get_kernel, register

_FLASH = r"""
#define DPT (HS / SPLIT)
#define NT (TILE * SPLIT)

__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
    for (int o = SPLIT / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(NT) flash_fwd(
        const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
        float* __restrict__ lse, int Tq, int Tk, float scale, int causal) {
    __shared__ float ks[TILE][HS];
    __shared__ float vs[TILE][HS];
    const int tid = threadIdx.x, r = tid / SPLIT, h = tid % SPLIT;
    const long long bh = blockIdx.y;
    const int qi = blockIdx.x * TILE + r;
    const bool active = qi < Tq;
    const int off = Tk - Tq;
    const T* qp = q + (bh * Tq + (active ? qi : 0)) * HS;
    const T* kb = k + bh * Tk * HS;
    const T* vb = v + bh * Tk * HS;
    float qr[DPT], acc[DPT];
#pragma unroll
    for (int d = 0; d < DPT; d++) { qr[d] = active ? (float)LD(qp, d * SPLIT + h) * scale : 0.f; acc[d] = 0.f; }
    float m = NEG_INF, l = 0.f;
    int q_last = min(Tq, (int)(blockIdx.x + 1) * TILE) - 1;
    int k_end = causal ? min(Tk, q_last + off + 1) : Tk;
    int my_last = causal ? qi + off : Tk - 1;
    for (int k0 = 0; k0 < k_end; k0 += TILE) {
        __syncthreads();
        for (int e = tid; e < TILE * HS; e += NT) {
            int jj = e / HS, dd = e % HS, j = k0 + jj;
            ks[jj][dd] = j < Tk ? (float)LD(kb, (long long)j * HS + dd) : 0.f;
            vs[jj][dd] = j < Tk ? (float)LD(vb, (long long)j * HS + dd) : 0.f;
        }
        __syncthreads();
        int n_keys = min(TILE, k_end - k0);
        for (int c0 = 0; c0 < n_keys; c0 += KC) {
            float s[KC];
            float cmax = NEG_INF;
#pragma unroll
            for (int c = 0; c < KC; c++) {
                int jj = c0 + c;
                float part = 0.f;
#pragma unroll
                for (int d = 0; d < DPT; d++) part += qr[d] * ks[jj][d * SPLIT + h];
                part = row_sum(part);
                bool ok = active && jj < n_keys && k0 + jj <= my_last;
                s[c] = ok ? part : NEG_INF;
                cmax = fmaxf(cmax, s[c]);
            }
            if (cmax > NEG_INF) {
                float m_new = fmaxf(m, cmax);
                float corr = expf(m - m_new);
                l *= corr;
#pragma unroll
                for (int d = 0; d < DPT; d++) acc[d] *= corr;
#pragma unroll
                for (int c = 0; c < KC; c++) {
                    float p = expf(s[c] - m_new);
                    l += p;
#pragma unroll
                    for (int d = 0; d < DPT; d++) acc[d] += p * vs[c0 + c][d * SPLIT + h];
                }
                m = m_new;
            }
        }
    }
    if (active) {
        float inv = l > 0.f ? 1.f / l : 0.f;
        T* op = o + (bh * Tq + qi) * HS;
#pragma unroll
        for (int d = 0; d < DPT; d++) ST(op, d * SPLIT + h, acc[d] * inv);
        if (h == 0) lse[bh * Tq + qi] = l > 0.f ? m + logf(l) : NEG_INF;
    }
}

extern "C" __global__ void __launch_bounds__(NT) flash_bwd_dq(
        const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ go,
        const float* __restrict__ lse, const float* __restrict__ dsum, T* __restrict__ gq,
        int Tq, int Tk, float scale, int causal) {
    __shared__ float ks[TILE][HS];
    __shared__ float vs[TILE][HS];
    const int tid = threadIdx.x, r = tid / SPLIT, h = tid % SPLIT;
    const long long bh = blockIdx.y;
    const int qi = blockIdx.x * TILE + r;
    const bool active = qi < Tq;
    const int off = Tk - Tq;
    const long long row = bh * Tq + (active ? qi : 0);
    const T* kb = k + bh * Tk * HS;
    const T* vb = v + bh * Tk * HS;
    float qr[DPT], dor[DPT], dq[DPT];
#pragma unroll
    for (int d = 0; d < DPT; d++) {
        qr[d] = active ? (float)LD(q, row * HS + d * SPLIT + h) : 0.f;
        dor[d] = active ? (float)LD(go, row * HS + d * SPLIT + h) : 0.f;
        dq[d] = 0.f;
    }
    const float L = active ? lse[row] : 0.f, D = active ? dsum[row] : 0.f;
    int q_last = min(Tq, (int)(blockIdx.x + 1) * TILE) - 1;
    int k_end = causal ? min(Tk, q_last + off + 1) : Tk;
    int my_last = causal ? qi + off : Tk - 1;
    for (int k0 = 0; k0 < k_end; k0 += TILE) {
        __syncthreads();
        for (int e = tid; e < TILE * HS; e += NT) {
            int jj = e / HS, dd = e % HS, j = k0 + jj;
            ks[jj][dd] = j < Tk ? (float)LD(kb, (long long)j * HS + dd) : 0.f;
            vs[jj][dd] = j < Tk ? (float)LD(vb, (long long)j * HS + dd) : 0.f;
        }
        __syncthreads();
        int n_keys = min(TILE, k_end - k0);
        for (int jj = 0; jj < n_keys; jj++) {
            float s = 0.f, dp = 0.f;
#pragma unroll
            for (int d = 0; d < DPT; d++) { s += qr[d] * ks[jj][d * SPLIT + h]; dp += dor[d] * vs[jj][d * SPLIT + h]; }
            s = row_sum(s);
            dp = row_sum(dp);
            bool ok = active && k0 + jj <= my_last;
            float p = ok ? expf(s * scale - L) : 0.f;
            float ds = p * (dp - D);
#pragma unroll
            for (int d = 0; d < DPT; d++) dq[d] += ds * ks[jj][d * SPLIT + h];
        }
    }
    if (active) {
#pragma unroll
        for (int d = 0; d < DPT; d++) ST(gq, row * HS + d * SPLIT + h, dq[d] * scale);
    }
}

extern "C" __global__ void __launch_bounds__(NT) flash_bwd_dkdv(
        const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ go,
        const float* __restrict__ lse, const float* __restrict__ dsum, T* __restrict__ gk, T* __restrict__ gv,
        int Tq, int Tk, float scale, int causal) {
    __shared__ float qs[TILE][HS];
    __shared__ float dos[TILE][HS];
    __shared__ float Ls[TILE];
    __shared__ float Ds[TILE];
    const int tid = threadIdx.x, r = tid / SPLIT, h = tid % SPLIT;
    const long long bh = blockIdx.y;
    const int kj = blockIdx.x * TILE + r;
    const bool active = kj < Tk;
    const int off = Tk - Tq;
    const long long krow = bh * Tk + (active ? kj : 0);
    const T* qb = q + bh * Tq * HS;
    const T* gob = go + bh * Tq * HS;
    float kr[DPT], vr[DPT], dk[DPT], dv[DPT];
#pragma unroll
    for (int d = 0; d < DPT; d++) {
        kr[d] = active ? (float)LD(k, krow * HS + d * SPLIT + h) : 0.f;
        vr[d] = active ? (float)LD(v, krow * HS + d * SPLIT + h) : 0.f;
        dk[d] = 0.f;
        dv[d] = 0.f;
    }
    // the first query that sees this block's first key: i >= j - off
    int q_start = causal ? max(0, (int)blockIdx.x * TILE - off) : 0;
    for (int q0 = q_start; q0 < Tq; q0 += TILE) {
        __syncthreads();
        for (int e = tid; e < TILE * HS; e += NT) {
            int ii = e / HS, dd = e % HS, i = q0 + ii;
            qs[ii][dd] = i < Tq ? (float)LD(qb, (long long)i * HS + dd) : 0.f;
            dos[ii][dd] = i < Tq ? (float)LD(gob, (long long)i * HS + dd) : 0.f;
        }
        for (int e = tid; e < TILE; e += NT) {
            int i = q0 + e;
            Ls[e] = i < Tq ? lse[bh * Tq + i] : 0.f;
            Ds[e] = i < Tq ? dsum[bh * Tq + i] : 0.f;
        }
        __syncthreads();
        int n_q = min(TILE, Tq - q0);
        for (int ii = 0; ii < n_q; ii++) {
            float s = 0.f, dp = 0.f;
#pragma unroll
            for (int d = 0; d < DPT; d++) { s += qs[ii][d * SPLIT + h] * kr[d]; dp += dos[ii][d * SPLIT + h] * vr[d]; }
            s = row_sum(s);
            dp = row_sum(dp);
            bool ok = active && (!causal || kj <= q0 + ii + off);
            float p = ok ? expf(s * scale - Ls[ii]) : 0.f;
            float ds = p * (dp - Ds[ii]);
#pragma unroll
            for (int d = 0; d < DPT; d++) { dv[d] += p * dos[ii][d * SPLIT + h]; dk[d] += ds * qs[ii][d * SPLIT + h]; }
        }
    }
    if (active) {
#pragma unroll
        for (int d = 0; d < DPT; d++) {
            ST(gk, krow * HS + d * SPLIT + h, dk[d] * scale);
            ST(gv, krow * HS + d * SPLIT + h, dv[d]);
        }
    }
}
"""

# Matmul path: S = q k^T comes from cuBLAS; one kernel scales, masks and softmaxes each row in
# place, and one kernel turns dP into dS = scale * P * (dP - D) in place.
_ROWS = register("attention_rows", r"""
extern "C" __global__ void masked_softmax(T* __restrict__ s, long long Tq, long long Tk, A scale, int causal) {
    __shared__ A red[32];
    long long row = blockIdx.x;
    long long i = row % Tq;
    long long last = causal ? i + Tk - Tq : Tk - 1;    // the last visible key of this query
    T* sr = s + row * Tk;
    A m = NEG_INF;
    for (long long j = threadIdx.x; j < Tk; j += blockDim.x) if (j <= last) m = max_a(m, LD(sr, j) * scale);
    m = block_max(m, red);
    if (!(m > NEG_INF)) {
        for (long long j = threadIdx.x; j < Tk; j += blockDim.x) ST(sr, j, 0);
        return;
    }
    A z = 0;
    for (long long j = threadIdx.x; j < Tk; j += blockDim.x) if (j <= last) z += exp_a(LD(sr, j) * scale - m);
    z = block_sum(z, red);
    A inv = (A)1 / z;
    for (long long j = threadIdx.x; j < Tk; j += blockDim.x)
        ST(sr, j, j <= last ? exp_a(LD(sr, j) * scale - m) * inv : (A)0);
}

extern "C" __global__ void softmax_grad_rows(T* __restrict__ dp, const T* __restrict__ p, const A* __restrict__ dsum,
                                             long long Tk, A scale) {
    long long row = blockIdx.x;
    A D = dsum[row];
    for (long long j = threadIdx.x; j < Tk; j += blockDim.x) {
        long long e = row * Tk + j;
        ST(dp, e, scale * LD(p, e) * (LD(dp, e) - D));
    }
}
""")

_KC = 16


def _flash_defines(hs: int) -> tuple:
    split = max(1, hs // 32)
    tile = 4096 // hs
    return (("HS", hs), ("SPLIT", split), ("TILE", tile), ("KC", _KC))


for _hs in (32, 64, 128):
    register(f"flash_hs{_hs}", _FLASH, ("float16", "float32"), _flash_defines(_hs))


def supports(q, k, v, attn_mask, dropout_p) -> bool:
    """Whether the fused GPU attention handles this call (else the plain array op runs)."""
    if attn_mask is not None or dropout_p > 0.0 or q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        return False
    return q.dtype == k.dtype == v.dtype and dtype_name_or_none(q) is not None


def dtype_name_or_none(a):
    try:
        return dtype_name(a)
    except TypeError:
        return None


def _flash_ok(q, v) -> bool:
    B, H = q.shape[0], q.shape[1]
    return (attention_mode() == "flash" and q.shape[-1] in (32, 64, 128) and v.shape[-1] == q.shape[-1]
            and np.dtype(q.dtype) in (np.float16, np.float32) and B * H <= 65535)


def forward(node, q, k, v, causal: bool = True, attn_mask=None, dropout_p: float = 0.0, scale=None,
            generator=None):
    """The fused attention forward on `node` (a ScaledDotProductAttention): (B, H, Tq, hv), or
    None for a call the kernels do not handle (a mask, dropout, other ranks or dtypes)."""
    if not supports(q, k, v, attn_mask, dropout_p):
        return None
    xp = xp_of(q)
    B, H, Tq, hs = q.shape
    Tk = k.shape[-2]
    scale = 1.0 / math.sqrt(hs) if scale is None else float(scale)
    node.scale, node.causal = scale, bool(causal)
    node.dropout_p = 0.0
    qc, kc, vc = (xp.ascontiguousarray(a) for a in (q, k, v))
    if _flash_ok(q, v):
        defines = _flash_defines(hs)
        tile = defines[2][1]
        out = xp.empty((B, H, Tq, hs), dtype=q.dtype)
        lse = xp.empty((B * H * Tq,), dtype=np.float32)
        if B * H and Tq:
            kern = get_kernel(_FLASH, "flash_fwd", dtype_name(q), defines)
            kern((-(-Tq // tile), B * H), (tile * defines[1][1],),
                 (qc, kc, vc, out, lse, np.int32(Tq), np.int32(Tk), np.float32(scale), np.int32(causal)))
        node.mode = "flash"
        node.q, node.k, node.v, node.out, node.lse = qc, kc, vc, out, lse
        return out
    s = xp.matmul(qc, kc.swapaxes(-1, -2))                         # (B, H, Tq, Tk), owned
    s = xp.ascontiguousarray(s)
    acc = acc_dtype(s.dtype).type
    rows = B * H * Tq
    if rows and Tk:
        kern = get_kernel(_ROWS, "masked_softmax", dtype_name(s))
        kern((rows,), (block_size_for(Tk),), (s, np.int64(Tq), np.int64(Tk), acc(scale), np.int32(causal)))
    out = xp.matmul(s, vc)                                         # (B, H, Tq, hv)
    node.mode = "matmul"
    node.q, node.k, node.v, node.p, node.out = qc, kc, vc, s, out
    return out


def backward(node, g):
    xp = xp_of(g)
    q, k, v, out = node.q, node.k, node.v, node.out
    B, H, Tq, hs = q.shape
    Tk = k.shape[-2]
    g = xp.ascontiguousarray(g.astype(q.dtype, copy=False))
    nq, nk, nv = node.needs_input_grad
    # D = rowsum(dO * O): (B, H, Tq) in float32 (float64 for float64 inputs)
    acc = acc_dtype(q.dtype).type
    dsum = xp.ascontiguousarray((g.astype(acc) * out.astype(acc)).sum(axis=-1))
    if node.mode == "flash":
        defines = _flash_defines(hs)
        tile, split = defines[2][1], defines[1][1]
        dt = dtype_name(q)
        args = (np.int32(Tq), np.int32(Tk), np.float32(node.scale), np.int32(node.causal))
        gq = gk = gv = None
        if nq:
            gq = xp.empty_like(q)
            get_kernel(_FLASH, "flash_bwd_dq", dt, defines)(
                (-(-Tq // tile), B * H), (tile * split,), (q, k, v, g, node.lse, dsum, gq) + args)
        if nk or nv:
            gk, gv = xp.empty_like(k), xp.empty_like(v)
            get_kernel(_FLASH, "flash_bwd_dkdv", dt, defines)(
                (-(-Tk // tile), B * H), (tile * split,), (q, k, v, g, node.lse, dsum, gk, gv) + args)
        return gq, (gk if nk else None), (gv if nv else None)
    p = node.p
    gv = xp.matmul(p.swapaxes(-1, -2), g) if nv else None          # (B, H, Tk, hv)
    if not (nq or nk):
        return None, None, gv
    ds = xp.ascontiguousarray(xp.matmul(g, v.swapaxes(-1, -2)))   # dP (B, H, Tq, Tk), owned
    rows = B * H * Tq
    if rows and Tk:
        kern = get_kernel(_ROWS, "softmax_grad_rows", dtype_name(ds))
        kern((rows,), (block_size_for(Tk),), (ds, p, dsum, np.int64(Tk), acc(node.scale)))
    gq = xp.matmul(ds, k) if nq else None                          # (B, H, Tq, hs)
    gk = xp.matmul(ds.swapaxes(-1, -2), q) if nk else None         # (B, H, Tk, hs)
    return gq, gk, gv
