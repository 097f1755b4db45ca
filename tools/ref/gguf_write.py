#!/usr/bin/python3
"""gguf_write.py -- a small GGUF v2/v3 writer and simple quantisers, used to
build test files for the numpy reference (tools/ref/selftest.py) and for
kvloom's own tests.

The quantisers are deliberately plain (max-abs scales, no error search): they
only need to produce *valid* blocks whose logical contents we know. The
block packers (`pack_*`) take the logical values of a block -- scales, mins
and integer quants -- and lay them out byte by byte per the ggml block
definitions, so a test can state the expected dequantised value of every
element independently of the vectorised unpackers in gguf_ref.py.

Invariants: tensors are written in insertion order, each at an offset that is
a multiple of the alignment; the data section starts at the first aligned
offset after the tensor infos; the file ends at the end of the last tensor
(padded to the alignment).
"""

import struct

import numpy as np

from gguf_ref import (GGML_TYPES, T_BF16, T_F16, T_F32, T_Q4_0, T_Q4_K, T_Q5_K,
                      T_Q6_K, T_Q8_0, VT_ARRAY, VT_BOOL, VT_FLOAT32, VT_STRING,
                      VT_UINT32, _SCALAR)

# ---------------------------------------------------------------------------
# Block packers: logical values -> bytes. Every argument may carry a leading
# block axis (nb, ...) to pack many blocks at once; a single block works too.
# ---------------------------------------------------------------------------


def _u8(a):
    return np.asarray(a, dtype=np.int64).astype(np.uint8)


def _f16le(d, nb):
    """Scales (scalar or (nb,)) as little-endian f16 bytes, (nb, 2) uint8."""
    return np.asarray(d, dtype="<f2").reshape(-1, 1).view(np.uint8).reshape(nb, 2)


def f16_bytes(x):
    return np.asarray([x], dtype="<f2").tobytes()


def _blocks_of(q, shape):
    q = np.asarray(q, dtype=np.int64)
    return q.reshape((-1,) + shape)


def pack_q8_0(d, q):
    """d: float(s) (stored as f16); q: 32 ints in [-128, 127] per block."""
    q = _blocks_of(q, (32,))
    assert q.min() >= -128 and q.max() <= 127
    nb = q.shape[0]
    return np.concatenate([_f16le(d, nb), q.astype(np.int8).view(np.uint8)], axis=1).tobytes()


def pack_q4_0(d, q):
    """d: float(s); q: 32 ints in [0, 15] per block (value = (q - 8) * d).
    Byte j holds q[j] in its low nibble and q[j + 16] in its high nibble."""
    q = _blocks_of(q, (32,))
    assert q.min() >= 0 and q.max() <= 15
    b = q[:, 0:16] | (q[:, 16:32] << 4)
    return np.concatenate([_f16le(d, q.shape[0]), _u8(b)], axis=1).tobytes()


def pack_k_scales(sc, m):
    """8 six-bit scales and 8 six-bit mins per block -> the 12 packed bytes
    of Q4_K/Q5_K, (nb, 12) uint8:
      bytes 0..3 : sc[0..3] in bits 0..5, sc[4..7] >> 4 in bits 6..7
      bytes 4..7 : m[0..3]  in bits 0..5, m[4..7]  >> 4 in bits 6..7
      bytes 8..11: sc[4..7] & 15 in bits 0..3, m[4..7] & 15 in bits 4..7"""
    sc = _blocks_of(sc, (8,))
    m = _blocks_of(m, (8,))
    assert sc.min() >= 0 and sc.max() < 64 and m.min() >= 0 and m.max() < 64
    b = np.empty((sc.shape[0], 12), dtype=np.int64)
    b[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    b[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    b[:, 8:12] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
    return _u8(b)


def pack_q4_k(d, dmin, sc, m, q):
    """q: 256 ints in [0, 15] per block; element i of sub-block j = i // 32
    has value d*sc[j]*q - dmin*m[j]. Sub-blocks 2c and 2c+1 share bytes
    32c..32c+31 of qs (low and high nibble)."""
    q = _blocks_of(q, (8, 32))
    assert q.min() >= 0 and q.max() <= 15
    nb = q.shape[0]
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(nb, 128)
    return np.concatenate([_f16le(d, nb), _f16le(dmin, nb), pack_k_scales(sc, m), _u8(qs)],
                          axis=1).tobytes()


def pack_q5_k(d, dmin, sc, m, q):
    """q: 256 ints in [0, 31] per block; as Q4_K for the low 4 bits, and the
    fifth bit of element l of sub-block j is bit j of qh[l]."""
    q = _blocks_of(q, (8, 32))
    assert q.min() >= 0 and q.max() <= 31
    nb = q.shape[0]
    qh = np.zeros((nb, 32), dtype=np.int64)
    for j in range(8):
        qh |= ((q[:, j, :] >> 4) & 1) << j
    qs = ((q[:, 0::2, :] & 15) | ((q[:, 1::2, :] & 15) << 4)).reshape(nb, 128)
    return np.concatenate([_f16le(d, nb), _f16le(dmin, nb), pack_k_scales(sc, m), _u8(qh),
                           _u8(qs)], axis=1).tobytes()


def pack_q6_k(d, sc, q):
    """sc: 16 int8 scales per block (one per 16 elements); q: 256 ints in
    [-32, 31]; value of element i = d * sc[i // 16] * q[i]. Within each
    128-element half n, element 32k + l (k = 0..3, l = 0..31) keeps its low
    4 bits in ql[64n + 32*(k & 1) + l] (low nibble for k < 2, high for
    k >= 2) and its high 2 bits in qh[32n + l] at bits 2k..2k+1."""
    q = _blocks_of(q, (256,)) + 32
    assert q.min() >= 0 and q.max() <= 63
    sc = _blocks_of(sc, (16,))
    assert sc.min() >= -128 and sc.max() <= 127
    nb = q.shape[0]
    ql = np.zeros((nb, 128), dtype=np.int64)
    qh = np.zeros((nb, 64), dtype=np.int64)
    for n in range(2):
        for k in range(4):
            v = q[:, 128 * n + 32 * k:128 * n + 32 * k + 32]       # 32 elements
            i = 64 * n + 32 * (k & 1)
            ql[:, i:i + 32] |= (v & 15) << (4 * (k >> 1))
            qh[:, 32 * n:32 * n + 32] |= (v >> 4) << (2 * k)
    return np.concatenate([_u8(ql), _u8(qh), sc.astype(np.int8).view(np.uint8), _f16le(d, nb)],
                          axis=1).tobytes()


# ---------------------------------------------------------------------------
# Quantisers: float32 values -> bytes, plain max-abs schemes
# ---------------------------------------------------------------------------


def _f16r(x):
    """Rounds to the nearest f16 and back (what a stored f16 scale holds)."""
    return np.asarray(x, dtype=np.float16).astype(np.float64)


def _safe_div(a, b):
    return np.where(b != 0, a / np.where(b != 0, b, 1.0), 0.0)


def quantize(ttype, x):
    """x: float array (any shape, flattened; size a multiple of the block)."""
    x = np.asarray(x, dtype=np.float32).reshape(-1)
    if ttype == T_F32:
        return x.astype("<f4").tobytes()
    if ttype == T_F16:
        return x.astype("<f2").tobytes()
    if ttype == T_BF16:
        u = x.view(np.uint32).astype(np.uint64)
        r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16         # round to nearest even
        return r.astype("<u2").tobytes()
    xd = x.astype(np.float64)
    if ttype == T_Q8_0:
        blk = xd.reshape(-1, 32)
        d = _f16r(np.abs(blk).max(axis=1) / 127.0)
        q = np.clip(np.round(_safe_div(blk, d[:, None])), -127, 127)
        return pack_q8_0(d, q)
    if ttype == T_Q4_0:
        blk = xd.reshape(-1, 32)
        mx = blk[np.arange(blk.shape[0]), np.argmax(np.abs(blk), axis=1)]   # signed max-abs
        d = _f16r(mx / -8.0)
        q = np.where(d[:, None] != 0, np.clip(np.floor(_safe_div(blk, d[:, None]) + 8.5), 0, 15), 8)
        return pack_q4_0(d, q)
    if ttype in (T_Q4_K, T_Q5_K):
        qmax = 15 if ttype == T_Q4_K else 31
        blk = xd.reshape(-1, 8, 32)
        lo = np.minimum(blk.min(axis=2), 0.0)                  # (nb, 8)
        scale = (blk.max(axis=2) - lo) / qmax
        mins = -lo
        d = _f16r(scale.max(axis=1) / 63.0)                    # (nb,)
        dmin = _f16r(mins.max(axis=1) / 63.0)
        sc = np.clip(np.round(_safe_div(scale, d[:, None])), 0, 63)
        m = np.clip(np.round(_safe_div(mins, dmin[:, None])), 0, 63)
        d1 = (d[:, None] * sc)[:, :, None]
        m1 = (dmin[:, None] * m)[:, :, None]
        q = np.clip(np.round(_safe_div(blk + m1, d1)), 0, qmax)
        pack = pack_q4_k if ttype == T_Q4_K else pack_q5_k
        return pack(d, dmin, sc, m, q)
    if ttype == T_Q6_K:
        blk = xd.reshape(-1, 16, 16)
        scale = np.abs(blk).max(axis=2) / 31.0                 # (nb, 16)
        d = _f16r(scale.max(axis=1) / 127.0)
        sc = np.clip(np.round(_safe_div(scale, d[:, None])), 0, 127)
        q = np.clip(np.round(_safe_div(blk, (d[:, None] * sc)[:, :, None])), -32, 31)
        return pack_q6_k(d, sc, q.reshape(-1, 256))
    raise ValueError("quantize: type %d not supported" % ttype)


# ---------------------------------------------------------------------------
# Writer
# ---------------------------------------------------------------------------


def _enc_str(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _enc_value(vtype, v):
    if vtype == VT_STRING:
        return _enc_str(v)
    if vtype == VT_ARRAY:
        etype, items = v
        head = struct.pack("<IQ", etype, len(items))
        if etype in _SCALAR:
            return head + np.asarray(items).astype(_SCALAR[etype][1]).tobytes()
        return head + b"".join(_enc_value(etype, it) for it in items)
    fmt = _SCALAR[vtype][0]
    return struct.pack(fmt, int(v) if vtype == VT_BOOL else v)


class GGUFWriter:
    """Collects metadata and tensors, then writes one GGUF file."""

    def __init__(self, version=3, alignment=32):
        self.version = version
        self.alignment = alignment
        self.kv = []          # (key, vtype, value)
        self.tensors = []     # (name, ttype, dims, bytes)
        if alignment != 32:
            self.add("general.alignment", VT_UINT32, alignment)

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value))

    def add_str(self, key, s):
        self.add(key, VT_STRING, s)

    def add_u32(self, key, v):
        self.add(key, VT_UINT32, v)

    def add_f32(self, key, v):
        self.add(key, VT_FLOAT32, v)

    def add_tensor(self, name, ttype, array):
        """array: numpy values in numpy order (rows outermost); quantised
        with `quantize` unless already bytes (then dims must be given via
        add_tensor_raw)."""
        a = np.asarray(array, dtype=np.float32)
        dims = list(reversed(a.shape))
        self.add_tensor_raw(name, ttype, dims, quantize(ttype, a))

    def add_tensor_raw(self, name, ttype, dims, data):
        _, blck, tsize = GGML_TYPES[ttype]
        n = int(np.prod(dims))
        assert dims[0] % blck == 0 and len(data) == n // blck * tsize, name
        self.tensors.append((name, ttype, list(dims), bytes(data)))

    def to_bytes(self):
        al = self.alignment
        out = bytearray(b"GGUF")
        out += struct.pack("<IQQ", self.version, len(self.tensors), len(self.kv))
        for key, vt, v in self.kv:
            out += _enc_str(key) + struct.pack("<I", vt) + _enc_value(vt, v)
        offs = []
        off = 0
        for name, ttype, dims, data in self.tensors:
            offs.append(off)
            out += _enc_str(name) + struct.pack("<I", len(dims))
            out += struct.pack("<%dQ" % len(dims), *dims)
            out += struct.pack("<IQ", ttype, off)
            off += (len(data) + al - 1) // al * al
        if self.tensors:
            out += b"\0" * (-len(out) % al)
            for (name, ttype, dims, data), o in zip(self.tensors, offs):
                out += data + b"\0" * (-len(data) % al)
        return bytes(out)

    def write(self, path):
        with open(path, "wb") as f:
            f.write(self.to_bytes())


# ---------------------------------------------------------------------------
# Random test models
# ---------------------------------------------------------------------------


def random_model(arch, ttype, seed=0, n_embd=64, n_layer=2, n_head=4, n_head_kv=2,
                 n_ff=96, n_vocab=50, head_dim=None, n_rot=None, rope_freqs=False,
                 tied=False, rope_scale=None, weights=None, n_expert=0, n_expert_used=0,
                 n_ff_exp=0):
    """Returns (GGUFWriter, dict of float32 weights by tensor name) for a
    random model. Matrices use `ttype`; norms, biases and rope_freqs stay
    F32 (as in real files). `weights` may supply some tensors by name.
    Arch "qwen3moe" takes n_expert, n_expert_used and n_ff_exp and writes the
    router (F32, as the converter keeps it) and 3-D expert tensors in ttype.
    Arch "gpt-oss" adds a sliding window of 3 on even layers, YaRN (factor
    32 over 64 original positions, so the ramp turns within a few tokens),
    q/k/v/o biases, sinks, post_attention_norm instead of ffn_norm, router
    and expert biases, and expert gate/up rows 4x larger so that the
    clamped SwiGLU's limits bite."""
    rng = np.random.default_rng(seed)
    hd = head_dim or n_embd // n_head
    w = GGUFWriter()
    w.add_str("general.architecture", arch)
    w.add_u32(arch + ".embedding_length", n_embd)
    w.add_u32(arch + ".block_count", n_layer)
    w.add_u32(arch + ".attention.head_count", n_head)
    w.add_u32(arch + ".attention.head_count_kv", n_head_kv)
    w.add_u32(arch + ".feed_forward_length", n_ff)
    w.add_u32(arch + ".context_length", 512)
    w.add_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6 if arch != "llama" else 1e-5)
    w.add_f32(arch + ".rope.freq_base", 10000.0 if arch == "llama" else 150000.0 if arch == "gpt-oss" else 1000000.0)
    if head_dim is not None:
        w.add_u32(arch + ".attention.key_length", hd)
        w.add_u32(arch + ".attention.value_length", hd)
    w.add_u32(arch + ".rope.dimension_count", n_rot or hd)
    if rope_scale is not None:
        w.add_str(arch + ".rope.scaling.type", "linear")
        w.add_f32(arch + ".rope.scaling.factor", rope_scale)
    oss = arch == "gpt-oss"
    if oss:
        w.add_u32(arch + ".attention.sliding_window", 3)
        w.add_str(arch + ".rope.scaling.type", "yarn")
        w.add_f32(arch + ".rope.scaling.factor", 32.0)
        w.add_u32(arch + ".rope.scaling.original_context_length", 64)
    if arch in ("qwen3moe", "gpt-oss"):
        w.add_u32(arch + ".expert_count", n_expert)
        w.add_u32(arch + ".expert_used_count", n_expert_used)
        w.add_u32(arch + ".expert_feed_forward_length", n_ff_exp)
    w.add(("tokenizer.ggml.eos_token_id"), VT_UINT32, 2)
    w.add(("tokenizer.ggml.bos_token_id"), VT_UINT32, 1)
    W = {}

    def mat(name, n_out, n_in, t=None, scale=None):
        a = weights[name] if weights and name in weights else \
            rng.standard_normal((n_out, n_in)).astype(np.float32) * (scale or n_in ** -0.5)
        W[name] = a
        w.add_tensor(name, ttype if t is None else t, a)

    def vec(name, n, base=1.0, spread=0.1):
        a = weights[name] if weights and name in weights else \
            (base + spread * rng.standard_normal(n)).astype(np.float32)
        W[name] = a
        w.add_tensor(name, T_F32, a)

    mat("token_embd.weight", n_vocab, n_embd, scale=1.0)
    vec("output_norm.weight", n_embd)
    if not tied:
        mat("output.weight", n_vocab, n_embd)
    if rope_freqs:
        # Llama 3 style divisors: 1 for high frequencies rising to 8 for low ones.
        r = n_rot or hd
        W["rope_freqs.weight"] = np.linspace(1.0, 8.0, r // 2).astype(np.float32)
        w.add_tensor("rope_freqs.weight", T_F32, W["rope_freqs.weight"])
    for i in range(n_layer):
        p = "blk.%d." % i
        vec(p + "attn_norm.weight", n_embd)
        mat(p + "attn_q.weight", n_head * hd, n_embd)
        mat(p + "attn_k.weight", n_head_kv * hd, n_embd)
        mat(p + "attn_v.weight", n_head_kv * hd, n_embd)
        mat(p + "attn_output.weight", n_embd, n_head * hd)
        if arch in ("qwen2", "gpt-oss"):
            vec(p + "attn_q.bias", n_head * hd, base=0.0, spread=0.5)
            vec(p + "attn_k.bias", n_head_kv * hd, base=0.0, spread=0.5)
            vec(p + "attn_v.bias", n_head_kv * hd, base=0.0, spread=0.5)
        if oss:
            vec(p + "attn_output.bias", n_embd, base=0.0, spread=0.5)
            vec(p + "attn_sinks.weight", n_head, base=0.0, spread=1.0)
        if arch in ("qwen3", "qwen3moe"):
            vec(p + "attn_q_norm.weight", hd)
            vec(p + "attn_k_norm.weight", hd)
        vec(p + ("post_attention_norm.weight" if oss else "ffn_norm.weight"), n_embd)
        if arch in ("qwen3moe", "gpt-oss"):
            mat(p + "ffn_gate_inp.weight", n_expert, n_embd, t=T_F32, scale=4 * n_embd ** -0.5)
            if oss:
                vec(p + "ffn_gate_inp.bias", n_expert, base=0.0, spread=0.5)
            for nm, o, i in (("ffn_gate_exps", n_ff_exp, n_embd), ("ffn_up_exps", n_ff_exp, n_embd),
                             ("ffn_down_exps", n_embd, n_ff_exp)):
                big = 4.0 if oss and nm != "ffn_down_exps" else 1.0
                a = rng.standard_normal((n_expert, o, i)).astype(np.float32) * (big * i ** -0.5)
                W[p + nm + ".weight"] = a
                w.add_tensor(p + nm + ".weight", ttype, a)
                if oss:
                    b = (0.5 * rng.standard_normal((n_expert, o))).astype(np.float32)
                    W[p + nm + ".bias"] = b
                    w.add_tensor(p + nm + ".bias", T_F32, b)
            continue
        mat(p + "ffn_gate.weight", n_ff, n_embd)
        mat(p + "ffn_up.weight", n_ff, n_embd)
        mat(p + "ffn_down.weight", n_embd, n_ff)
    return w, W
