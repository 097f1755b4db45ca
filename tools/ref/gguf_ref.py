#!/usr/bin/python3
"""gguf_ref.py -- the independent numpy reference that kvloom's C engine is
tested against: a GGUF v2/v3 reader, dequantisers for the weight types kvloom
runs, and a float64 forward pass of the Llama family (llama incl. Llama 3
rope_freqs and linear rope scaling, qwen2, qwen3) and the qwen3moe mixture of
experts (qwen3 attention; FFN = router softmax over all experts, the top-k,
their probabilities renormalised to sum 1 unless `{arch}.expert_weights_norm`
is false, and the weighted sum of the selected experts' SwiGLU FFNs), and
gpt-oss (from OpenAI's published model definition and the GGUF names):
biases on q/k/v/o, the router and the experts; one learned attention-sink
logit per query head that joins every softmax's denominator; a sliding window
of `attention.sliding_window` positions on layers l % period < period - 1
(period `attention.sliding_window_pattern`, default 2); YaRN rope (unrounded
correction range, cos/sin scaled by 0.1 ln(factor) + 1); router = softmax
over the top-k logits; experts' clamped SwiGLU (alpha 1.702, limit 7).

It is written from the format and architecture definitions (GGUF spec, ggml
block layouts, the model papers' equations), never from kvloom's C sources,
so that a bug in one is not silently shared by the other.

Run with /usr/bin/python3 (Debian's python3-numpy); only numpy and the
standard library are used.

    gguf_ref.py info   MODEL.gguf
    gguf_ref.py logits MODEL.gguf --tokens "1 5 9" --out FILE [--kv-f16]
    gguf_ref.py greedy MODEL.gguf --tokens "1 5 9" -n N [--kv-f16]

--kv-f16 models an engine whose KV cache holds IEEE half values (kvloom's
does): every K row (after biases, q/k-norm and rope) and every V row is
rounded to float16 (numpy's round-to-nearest-even) before attention uses
it. Without it the forward pass is float64 throughout.

Conventions and invariants:
  * A weight with GGUF dims {n_in, n_out} becomes a numpy array of shape
    (n_out, n_in): dims[0] is the innermost (contiguous) dimension.
  * Dequantisation follows ggml's arithmetic: every block value is computed
    in float32 in the same order ggml's reference dequantiser uses, so the
    result is bit-exact with it; the forward pass then runs in float64.
  * Untrusted bytes raise GGUFError (a ValueError) whose message names the
    field and its byte offset; nothing here calls exit() except main().
"""

import argparse
import math
import struct
import sys

import numpy as np

# ---------------------------------------------------------------------------
# GGUF container
# ---------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types (gguf_type).
VT_UINT8, VT_INT8, VT_UINT16, VT_INT16, VT_UINT32, VT_INT32 = 0, 1, 2, 3, 4, 5
VT_FLOAT32, VT_BOOL, VT_STRING, VT_ARRAY = 6, 7, 8, 9
VT_UINT64, VT_INT64, VT_FLOAT64 = 10, 11, 12

# Scalar value types: struct format and numpy dtype (little-endian).
_SCALAR = {
    VT_UINT8: ("<B", np.dtype("<u1")),
    VT_INT8: ("<b", np.dtype("<i1")),
    VT_UINT16: ("<H", np.dtype("<u2")),
    VT_INT16: ("<h", np.dtype("<i2")),
    VT_UINT32: ("<I", np.dtype("<u4")),
    VT_INT32: ("<i", np.dtype("<i4")),
    VT_FLOAT32: ("<f", np.dtype("<f4")),
    VT_BOOL: ("<B", np.dtype("<u1")),
    VT_UINT64: ("<Q", np.dtype("<u8")),
    VT_INT64: ("<q", np.dtype("<i8")),
    VT_FLOAT64: ("<d", np.dtype("<f8")),
}
VT_NAMES = {
    VT_UINT8: "u8", VT_INT8: "i8", VT_UINT16: "u16", VT_INT16: "i16",
    VT_UINT32: "u32", VT_INT32: "i32", VT_FLOAT32: "f32", VT_BOOL: "bool",
    VT_STRING: "str", VT_ARRAY: "arr", VT_UINT64: "u64", VT_INT64: "i64",
    VT_FLOAT64: "f64",
}

# Tensor element types (ggml_type): id -> (name, elements per block, bytes per block).
# All are parsed (sizes are known); only those in DEQUANT below can be decoded.
GGML_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}
TYPE_BY_NAME = {v[0]: k for k, v in GGML_TYPES.items()}
T_F32, T_F16, T_Q4_0, T_Q8_0 = 0, 1, 2, 8
T_Q4_K, T_Q5_K, T_Q6_K, T_BF16 = 12, 13, 14, 30
T_MXFP4 = 39


class GGUFError(ValueError):
    """Malformed or unsupported GGUF bytes; the message names field and offset."""


class TensorInfo:
    """One tensor description: name, ggml type, dims (innermost first), offset
    relative to the data section, and its size in bytes."""

    def __init__(self, name, ttype, dims, offset, n_bytes, info_offset):
        self.name = name
        self.type = ttype
        self.dims = dims
        self.offset = offset
        self.n_bytes = n_bytes
        self.info_offset = info_offset

    @property
    def n_elems(self):
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def type_name(self):
        return GGML_TYPES[self.type][0]


class _Cursor:
    """Bounds-checked little-endian reader over a bytes-like object."""

    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError("%s at offset %d: need %d bytes, only %d left"
                            % (what, self.pos, n, len(self.buf) - self.pos))
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return b

    def scalar(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def u32(self, what):
        return self.scalar("<I", what)

    def u64(self, what):
        return self.scalar("<Q", what)

    def string(self, what):
        at = self.pos
        n = self.u64(what + " length")
        if n > len(self.buf) - self.pos:
            raise GGUFError("%s at offset %d: length %d past end of file" % (what, at, n))
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            # Vocabularies may hold invalid UTF-8 pieces; keep them lossless.
            return raw.decode("utf-8", errors="surrogateescape")


def _read_strings(cur, n, what):
    """n strings, as _Cursor.string would read them one by one (the same
    checks and messages), in one loop: vocabularies hold 100,000+ of them
    and the per-element calls made the self-test's vocabulary pass take
    most of its time."""
    mb = memoryview(cur.buf).cast("B")
    pos, end, out = cur.pos, len(cur.buf), []
    for i in range(n):
        if end - pos < 8:
            raise GGUFError("%s[%d] length at offset %d: need 8 bytes, only %d left" % (what, i, pos, end - pos))
        ln = int.from_bytes(mb[pos:pos + 8], "little")
        if ln > end - pos - 8:
            raise GGUFError("%s[%d] at offset %d: length %d past end of file" % (what, i, pos, ln))
        raw = bytes(mb[pos + 8:pos + 8 + ln])
        pos += 8 + ln
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(raw.decode("utf-8", errors="surrogateescape"))
    cur.pos = pos
    return out


def _read_value(cur, vtype, what, depth=0):
    """Reads one metadata value of type `vtype`. Arrays come back as a list
    (strings, nested arrays) or a numpy array (numeric elements)."""
    if vtype in _SCALAR:
        fmt, _ = _SCALAR[vtype]
        v = cur.scalar(fmt, what)
        if vtype == VT_BOOL:
            if v > 1:
                raise GGUFError("%s at offset %d: bool value %d" % (what, cur.pos - 1, v))
            return bool(v)
        return v
    if vtype == VT_STRING:
        return cur.string(what)
    if vtype == VT_ARRAY:
        if depth > 8:
            raise GGUFError("%s at offset %d: arrays nested too deeply" % (what, cur.pos))
        at = cur.pos
        etype = cur.u32(what + " element type")
        n = cur.u64(what + " element count")
        if etype in _SCALAR:
            _, dt = _SCALAR[etype]
            nbytes = n * dt.itemsize
            if nbytes > len(cur.buf) - cur.pos:
                raise GGUFError("%s at offset %d: %d elements of %s past end of file"
                                % (what, at, n, VT_NAMES[etype]))
            arr = np.frombuffer(cur.take(nbytes, what), dtype=dt).copy()
            if etype == VT_BOOL:
                arr = arr.astype(bool)
            return (etype, arr)
        if etype == VT_STRING or etype == VT_ARRAY:
            # Each element needs at least 8 bytes (a length or a type+count).
            if n * 8 > len(cur.buf) - cur.pos:
                raise GGUFError("%s at offset %d: %d elements past end of file" % (what, at, n))
            if etype == VT_STRING:
                return (etype, _read_strings(cur, n, what))
            return (etype, [_read_value(cur, etype, "%s[%d]" % (what, i), depth + 1)
                            for i in range(n)])
        raise GGUFError("%s at offset %d: unknown array element type %d" % (what, at, etype))
    raise GGUFError("%s at offset %d: unknown value type %d" % (what, cur.pos - 4, vtype))


class GGUFFile:
    """A parsed GGUF v2/v3 file.

    kv:        dict key -> (vtype, value); arrays are (VT_ARRAY, (etype, items)).
    tensors:   dict name -> TensorInfo, in file order (tensor_names keeps order).
    alignment, data_offset, version, file_size.
    """

    def __init__(self, path):
        self.path = path
        self.buf = np.memmap(path, dtype=np.uint8, mode="r") if _file_size(path) > 0 \
            else np.zeros(0, dtype=np.uint8)
        self._parse()

    @classmethod
    def from_bytes(cls, data):
        self = cls.__new__(cls)
        self.path = "<bytes>"
        self.buf = np.frombuffer(bytes(data), dtype=np.uint8)
        self._parse()
        return self

    def _parse(self):
        cur = _Cursor(self.buf)
        self.file_size = len(self.buf)
        magic = cur.take(4, "magic")
        if magic != GGUF_MAGIC:
            raise GGUFError("magic at offset 0: %r is not 'GGUF'" % magic)
        self.version = cur.u32("version")
        if self.version not in (2, 3):
            raise GGUFError("version at offset 4: %d unsupported (need 2 or 3)" % self.version)
        n_tensors = cur.u64("n_tensors")
        n_kv = cur.u64("n_kv")
        self.kv = {}
        for i in range(n_kv):
            at = cur.pos
            key = cur.string("key %d" % i)
            vtype = cur.u32("key '%s' value type" % key)
            if vtype not in VT_NAMES:
                raise GGUFError("key '%s' at offset %d: unknown value type %d" % (key, at, vtype))
            val = _read_value(cur, vtype, "key '%s' value" % key)
            if key in self.kv:
                raise GGUFError("key '%s' at offset %d: duplicate key" % (key, at))
            self.kv[key] = (vtype, val)
        self.alignment = DEFAULT_ALIGNMENT
        if "general.alignment" in self.kv:
            vt, a = self.kv["general.alignment"]
            if vt != VT_UINT32 or a == 0 or (a & (a - 1)) != 0:
                raise GGUFError("general.alignment: %r is not a u32 power of two" % (a,))
            self.alignment = a
        self.tensors = {}
        self.tensor_names = []
        for i in range(n_tensors):
            at = cur.pos
            name = cur.string("tensor %d name" % i)
            n_dims = cur.u32("tensor '%s' n_dims" % name)
            if n_dims < 1 or n_dims > 4:
                raise GGUFError("tensor '%s' at offset %d: n_dims %d not in 1..4" % (name, at, n_dims))
            dims = [cur.u64("tensor '%s' dim %d" % (name, d)) for d in range(n_dims)]
            ttype = cur.u32("tensor '%s' type" % name)
            offset = cur.u64("tensor '%s' offset" % name)
            if ttype not in GGML_TYPES:
                raise GGUFError("tensor '%s' at offset %d: unknown type %d" % (name, at, ttype))
            _, blck, tsize = GGML_TYPES[ttype]
            if dims[0] % blck != 0:
                raise GGUFError("tensor '%s' at offset %d: dim 0 = %d not a multiple of block %d"
                                % (name, at, dims[0], blck))
            n_elems = 1
            for d in dims:
                n_elems *= d
            n_bytes = n_elems // blck * tsize
            if offset % self.alignment != 0:
                raise GGUFError("tensor '%s' at offset %d: data offset %d not aligned to %d"
                                % (name, at, offset, self.alignment))
            if name in self.tensors:
                raise GGUFError("tensor '%s' at offset %d: duplicate name" % (name, at))
            self.tensors[name] = TensorInfo(name, ttype, dims, offset, n_bytes, at)
            self.tensor_names.append(name)
        self.data_offset = (cur.pos + self.alignment - 1) // self.alignment * self.alignment
        for t in self.tensors.values():
            end = self.data_offset + t.offset + t.n_bytes
            if end > self.file_size:
                raise GGUFError("tensor '%s' at offset %d: data [%d, %d) past end of file (size %d)"
                                % (t.name, t.info_offset, self.data_offset + t.offset, end,
                                   self.file_size))

    # ---- metadata ----
    def get(self, key, default=None):
        """Scalar or string value of `key`; arrays as (etype, items)."""
        if key not in self.kv:
            return default
        return self.kv[key][1]

    def get_int(self, key, default=None):
        v = self.get(key, None)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise GGUFError("key '%s': expected an integer, got %r" % (key, v))
        return int(v)

    def get_float(self, key, default=None):
        v = self.get(key, None)
        if v is None:
            return default
        if isinstance(v, (bool, str, tuple)):
            raise GGUFError("key '%s': expected a number, got %r" % (key, v))
        return float(v)

    # ---- tensors ----
    def raw(self, name):
        """The tensor's bytes (a uint8 view into the mapping)."""
        t = self.tensors[name]
        start = self.data_offset + t.offset
        return self.buf[start:start + t.n_bytes]

    def tensor(self, name):
        """Dequantised tensor as float32, shape = reversed dims (rows outermost)."""
        t = self.tensors[name]
        flat = dequantize(t.type, self.raw(name), t.n_elems)
        return flat.reshape(tuple(reversed(t.dims)))


def _file_size(path):
    with open(path, "rb") as f:
        f.seek(0, 2)
        return f.tell()


# ---------------------------------------------------------------------------
# Dequantisation (ggml block layouts). Each function takes the raw bytes of
# whole blocks and returns float32 values in element order.
# ---------------------------------------------------------------------------

def _f16(b):
    """uint8 (..., 2k) -> float32 (..., k), IEEE half precision."""
    return np.ascontiguousarray(b).view("<f2").astype(np.float32)


def _blocks(raw, tsize):
    raw = np.asarray(raw, dtype=np.uint8)
    if raw.size % tsize != 0:
        raise GGUFError("tensor data of %d bytes is not whole blocks of %d" % (raw.size, tsize))
    return raw.reshape(-1, tsize)


def deq_f32(raw):
    return np.ascontiguousarray(raw).view("<f4").astype(np.float32)


def deq_f16(raw):
    return np.ascontiguousarray(raw).view("<f2").astype(np.float32)


def deq_bf16(raw):
    """bfloat16 is the top half of an IEEE float32."""
    hi = np.ascontiguousarray(raw).view("<u2").astype(np.uint32)
    return (hi << 16).view(np.float32)


def deq_q8_0(raw):
    """block_q8_0 (34 bytes): f16 d, int8 qs[32]; y[j] = qs[j] * d."""
    b = _blocks(raw, 34)
    d = _f16(b[:, 0:2])                                    # (nb, 1)
    q = b[:, 2:34].view(np.int8).astype(np.float32)        # (nb, 32)
    return (q * d).reshape(-1)


def deq_q4_0(raw):
    """block_q4_0 (18 bytes): f16 d, qs[16]; y[j] = (qs[j] & 15) - 8,
    y[j + 16] = (qs[j] >> 4) - 8, each times d."""
    b = _blocks(raw, 18)
    d = _f16(b[:, 0:2])
    qs = b[:, 2:18]
    lo = (qs & 0x0F).astype(np.int32) - 8
    hi = (qs >> 4).astype(np.int32) - 8
    q = np.concatenate([lo, hi], axis=1).astype(np.float32)  # (nb, 32)
    return (q * d).reshape(-1)


def _k_scales_mins(s):
    """The 12 bytes of 6-bit scales and mins of Q4_K/Q5_K -> (sc, m), each
    (nb, 8) float32. Sub-blocks 0..3: low 6 bits of bytes 0..3 (scale) and
    4..7 (min). Sub-blocks 4..7: low nibble (scale) / high nibble (min) of
    bytes 8..11, with the top 2 bits taken from bits 6..7 of bytes 0..3
    (scale) and 4..7 (min)."""
    s = s.astype(np.int32)
    sc = np.empty((s.shape[0], 8), dtype=np.int32)
    m = np.empty((s.shape[0], 8), dtype=np.int32)
    sc[:, 0:4] = s[:, 0:4] & 63
    m[:, 0:4] = s[:, 4:8] & 63
    sc[:, 4:8] = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    m[:, 4:8] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc.astype(np.float32), m.astype(np.float32)


def deq_q4_k(raw):
    """block_q4_K (144 bytes): f16 d, f16 dmin, scales[12], qs[128].
    Sub-block j (32 elements) of the 256: chunk c = j // 2 of 32 bytes of
    qs, low nibbles for even j, high nibbles for odd j;
    y = (d * sc[j]) * q - (dmin * m[j])."""
    b = _blocks(raw, 144)
    d = _f16(b[:, 0:2])
    dmin = _f16(b[:, 2:4])
    sc, m = _k_scales_mins(b[:, 4:16])
    qs = b[:, 16:144].reshape(-1, 4, 32)
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 8, 32).astype(np.float32)
    d1 = (d * sc)[:, :, None]
    m1 = (dmin * m)[:, :, None]
    return (d1 * q - m1).reshape(-1)


def deq_q5_k(raw):
    """block_q5_K (176 bytes): f16 d, f16 dmin, scales[12], qh[32], qs[128].
    As Q4_K, plus bit j of qh[l] adds 16 to element l of sub-block j."""
    b = _blocks(raw, 176)
    d = _f16(b[:, 0:2])
    dmin = _f16(b[:, 2:4])
    sc, m = _k_scales_mins(b[:, 4:16])
    qh = b[:, 16:48]                                         # (nb, 32)
    qs = b[:, 48:176].reshape(-1, 4, 32)
    lo4 = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 8, 32).astype(np.int32)
    shifts = np.arange(8, dtype=np.uint8)[None, :, None]
    hbit = ((qh[:, None, :] >> shifts) & 1).astype(np.int32)  # (nb, 8, 32)
    q = (lo4 + 16 * hbit).astype(np.float32)
    d1 = (d * sc)[:, :, None]
    m1 = (dmin * m)[:, :, None]
    return (d1 * q - m1).reshape(-1)


def deq_q6_k(raw):
    """block_q6_K (210 bytes): ql[128], qh[64], int8 scales[16], f16 d.
    Two halves of 128 elements; in half n, with L = ql[64n:64n+64] and
    H = qh[32n:32n+32], for l < 32:
      e[l]      = (L[l]      & 15) | ((H[l] >> 0) & 3) << 4
      e[l + 32] = (L[l + 32] & 15) | ((H[l] >> 2) & 3) << 4
      e[l + 64] = (L[l]      >> 4) | ((H[l] >> 4) & 3) << 4
      e[l + 96] = (L[l + 32] >> 4) | ((H[l] >> 6) & 3) << 4
    and y[i] = (d * scales[i // 16]) * (e[i] - 32)."""
    b = _blocks(raw, 210)
    nb = b.shape[0]
    ql = b[:, 0:128].reshape(nb, 2, 64).astype(np.int32)
    qh = b[:, 128:192].reshape(nb, 2, 32).astype(np.int32)
    sc = b[:, 192:208].view(np.int8).astype(np.float32)      # (nb, 16)
    d = _f16(b[:, 208:210])                                  # (nb, 1)
    lo_a, lo_b = ql[:, :, 0:32], ql[:, :, 32:64]
    e = np.empty((nb, 2, 4, 32), dtype=np.int32)
    e[:, :, 0] = (lo_a & 15) | (((qh >> 0) & 3) << 4)
    e[:, :, 1] = (lo_b & 15) | (((qh >> 2) & 3) << 4)
    e[:, :, 2] = (lo_a >> 4) | (((qh >> 4) & 3) << 4)
    e[:, :, 3] = (lo_b >> 4) | (((qh >> 6) & 3) << 4)
    q = (e.reshape(nb, 16, 16) - 32).astype(np.float32)
    ds = (d * sc)[:, :, None]
    return (ds * q).reshape(-1)


def deq_mxfp4(raw):
    """block_mxfp4 (17 bytes, OCP Microscaling MXFP4): u8 e, qs[16].
    e is an E8M0 scale 2^(e - 127). Element j (j < 16) is the low nibble of
    qs[j], element j + 16 the high nibble; a nibble is an E2M1 float: bit 3
    sign, bits 2..1 exponent E, bit 0 mantissa M, value
    (-1)^s * (E ? (1 + M/2) * 2^(E - 1) : M/2). Decoded from those bit
    fields (not from a value table), in float64, then float32 (exact)."""
    b = _blocks(raw, 17)
    e = b[:, 0:1].astype(np.float64)                         # (nb, 1)
    qs = b[:, 1:17]
    nib = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int64)  # (nb, 32)
    sign = np.where(nib & 8, -1.0, 1.0)
    ex = (nib >> 1) & 3
    man = (nib & 1).astype(np.float64)
    mag = np.where(ex == 0, man / 2, (1 + man / 2) * np.exp2(ex - 1.0))
    with np.errstate(over="ignore"):  # e >= 254: 3 * 2^128 and up are inf in float32
        return (sign * mag * np.exp2(e - 127)).astype(np.float32).reshape(-1)


DEQUANT = {
    T_F32: deq_f32,
    T_F16: deq_f16,
    T_BF16: deq_bf16,
    T_Q8_0: deq_q8_0,
    T_Q4_0: deq_q4_0,
    T_Q4_K: deq_q4_k,
    T_Q5_K: deq_q5_k,
    T_Q6_K: deq_q6_k,
    T_MXFP4: deq_mxfp4,
}


def dequantize(ttype, raw, n_elems=None):
    """Raw bytes of a tensor of ggml type `ttype` -> float32 values (flat)."""
    if ttype not in DEQUANT:
        name = GGML_TYPES.get(ttype, ("type %d" % ttype,))[0]
        raise GGUFError("tensor type %s is not supported by the reference" % name)
    out = DEQUANT[ttype](raw)
    if n_elems is not None and out.size != n_elems:
        raise GGUFError("dequantised %d values, expected %d" % (out.size, n_elems))
    return out


# ---------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------

ARCH_ROPE_NEOX = {"llama": False, "qwen2": True, "qwen3": True, "qwen3moe": True, "gpt-oss": True}
GPTOSS_ALPHA, GPTOSS_LIMIT = 1.702, 7.0


class Config:
    """Hyper-parameters from `{arch}.*` metadata and tensor shapes."""

    def __init__(self, g):
        arch = g.get("general.architecture")
        if not isinstance(arch, str):
            raise GGUFError("general.architecture: missing or not a string")
        if arch not in ARCH_ROPE_NEOX:
            raise GGUFError("general.architecture: '%s' not supported (llama, qwen2, qwen3, qwen3moe, gpt-oss)"
                            % arch)
        self.arch = arch

        def need_int(k):
            v = g.get_int("%s.%s" % (arch, k))
            if v is None or v <= 0:
                raise GGUFError("%s.%s: missing or not positive" % (arch, k))
            return v

        self.n_embd = need_int("embedding_length")
        self.n_layer = need_int("block_count")
        self.n_head = need_int("attention.head_count")
        self.n_expert = self.n_expert_used = self.n_ff_exp = 0
        self.expert_norm = True
        if arch in ("qwen3moe", "gpt-oss"):
            self.n_expert = need_int("expert_count")
            self.n_expert_used = need_int("expert_used_count")
            if self.n_expert_used > self.n_expert:
                raise GGUFError("%s.expert_used_count: %d exceeds expert_count %d"
                                % (arch, self.n_expert_used, self.n_expert))
            self.n_ff_exp = need_int("expert_feed_forward_length")
            norm = g.get(arch + ".expert_weights_norm")
            if arch == "gpt-oss":
                self.expert_norm = False   # softmax over the selected logits instead
            elif norm is not None:
                self.expert_norm = bool(norm)
            self.n_ff = g.get_int(arch + ".feed_forward_length", self.n_ff_exp)
        else:
            self.n_ff = need_int("feed_forward_length")
        self.n_head_kv = g.get_int(arch + ".attention.head_count_kv", self.n_head)
        if self.n_head_kv <= 0 or self.n_head % self.n_head_kv != 0:
            raise GGUFError("%s.attention.head_count_kv: %d does not divide head_count %d"
                            % (arch, self.n_head_kv, self.n_head))
        self.head_dim = g.get_int(arch + ".attention.key_length", self.n_embd // self.n_head)
        self.head_dim_v = g.get_int(arch + ".attention.value_length", self.head_dim)
        self.rms_eps = g.get_float(arch + ".attention.layer_norm_rms_epsilon", 1e-5)
        self.rope_base = g.get_float(arch + ".rope.freq_base", 10000.0)
        self.n_rot = g.get_int(arch + ".rope.dimension_count", self.head_dim)
        if self.n_rot % 2 != 0 or self.n_rot > self.head_dim or self.n_rot <= 0:
            raise GGUFError("%s.rope.dimension_count: %d invalid for head_dim %d"
                            % (arch, self.n_rot, self.head_dim))
        self.rope_scale = 1.0
        self.yarn = None
        stype = g.get(arch + ".rope.scaling.type")
        if stype is not None and stype not in ("none", "linear", "yarn"):
            raise GGUFError("%s.rope.scaling.type: '%s' not supported" % (arch, stype))
        if stype == "yarn":
            orig = g.get_int(arch + ".rope.scaling.original_context_length")
            if orig is None or orig <= 0:
                raise GGUFError("%s.rope.scaling.original_context_length: missing or not positive" % arch)
            self.yarn = {"factor": g.get_float(arch + ".rope.scaling.factor", 1.0), "orig": orig,
                         "beta_fast": g.get_float(arch + ".rope.scaling.yarn_beta_fast", 32.0),
                         "beta_slow": g.get_float(arch + ".rope.scaling.yarn_beta_slow", 1.0),
                         "attn_factor": g.get_float(arch + ".rope.scaling.yarn_attn_factor", 1.0),
                         "truncate": arch != "gpt-oss"}
        self.n_swa = 0
        self.swa_period = 2
        if arch == "gpt-oss":
            self.n_swa = need_int("attention.sliding_window")
            self.swa_period = g.get_int(arch + ".attention.sliding_window_pattern", 2)
        if stype == "linear":
            self.rope_scale = g.get_float(arch + ".rope.scaling.factor", 1.0)
        elif stype is None and g.get(arch + ".rope.scale_linear") is not None:
            self.rope_scale = g.get_float(arch + ".rope.scale_linear")  # older key
        if not self.rope_scale > 0:
            raise GGUFError("%s.rope.scaling.factor: %r not positive" % (arch, self.rope_scale))
        self.rope_neox = ARCH_ROPE_NEOX[arch]
        te = g.tensors.get("token_embd.weight")
        if te is None:
            raise GGUFError("tensor 'token_embd.weight' missing")
        self.n_vocab = te.dims[1] if len(te.dims) > 1 else 0
        self.bos_id = g.get_int("tokenizer.ggml.bos_token_id", None)
        self.eos_id = g.get_int("tokenizer.ggml.eos_token_id", None)

    def describe(self):
        return ("arch=%s n_vocab=%d n_embd=%d n_layer=%d n_head=%d n_head_kv=%d head_dim=%d "
                "n_ff=%d n_rot=%d rope=%s base=%g scale=%g eps=%g"
                % (self.arch, self.n_vocab, self.n_embd, self.n_layer, self.n_head,
                   self.n_head_kv, self.head_dim, self.n_ff, self.n_rot,
                   "neox" if self.rope_neox else "norm", self.rope_base, self.rope_scale,
                   self.rms_eps))


class Model:
    """Weights dequantised to float64 and a forward pass with a KV cache.
    kv_f16: round K and V to float16 (nearest-even) as they enter the cache,
    as an engine with an f16 KV cache does; otherwise float64 throughout."""

    def __init__(self, path_or_gguf, kv_f16=False):
        g = path_or_gguf if isinstance(path_or_gguf, GGUFFile) else GGUFFile(path_or_gguf)
        self.g = g
        self.kv_f16 = bool(kv_f16)
        c = self.cfg = Config(g)

        def w(name, shape):
            if name not in g.tensors:
                raise GGUFError("tensor '%s' missing" % name)
            a = g.tensor(name).astype(np.float64)
            if a.shape != shape:
                raise GGUFError("tensor '%s': shape %s, expected %s (numpy order)"
                                % (name, a.shape, shape))
            return a

        def opt(name, shape):
            return w(name, shape) if name in g.tensors else None

        qd, kd, vd = c.n_head * c.head_dim, c.n_head_kv * c.head_dim, c.n_head_kv * c.head_dim_v
        self.tok_embd = w("token_embd.weight", (c.n_vocab, c.n_embd))
        self.out_norm = w("output_norm.weight", (c.n_embd,))
        out = opt("output.weight", (c.n_vocab, c.n_embd))
        self.tied = out is None
        self.output = self.tok_embd if out is None else out
        self.rope_freqs = opt("rope_freqs.weight", (c.n_rot // 2,))
        self.layers = []
        for i in range(c.n_layer):
            p = "blk.%d." % i
            L = {
                "attn_norm": w(p + "attn_norm.weight", (c.n_embd,)),
                "bo": opt(p + "attn_output.bias", (c.n_embd,)),
                "sinks": opt(p + "attn_sinks.weight", (c.n_head,)),
                "window": c.n_swa if c.n_swa and i % c.swa_period < c.swa_period - 1 else 0,
                "wq": w(p + "attn_q.weight", (qd, c.n_embd)),
                "wk": w(p + "attn_k.weight", (kd, c.n_embd)),
                "wv": w(p + "attn_v.weight", (vd, c.n_embd)),
                "wo": w(p + "attn_output.weight", (c.n_embd, c.n_head * c.head_dim_v)),
                "ffn_norm": w(p + ("post_attention_norm.weight" if c.arch == "gpt-oss" else "ffn_norm.weight"),
                              (c.n_embd,)),
                "bq": opt(p + "attn_q.bias", (qd,)),
                "bk": opt(p + "attn_k.bias", (kd,)),
                "bv": opt(p + "attn_v.bias", (vd,)),
                "q_norm": opt(p + "attn_q_norm.weight", (c.head_dim,)),
                "k_norm": opt(p + "attn_k_norm.weight", (c.head_dim,)),
            }
            if c.n_expert:
                # GGUF dims {n_in, n_out, n_expert} -> numpy (n_expert, n_out, n_in)
                E, F = c.n_expert, c.n_ff_exp
                L["router"] = w(p + "ffn_gate_inp.weight", (E, c.n_embd))
                L["e_gate"] = w(p + "ffn_gate_exps.weight", (E, F, c.n_embd))
                L["e_up"] = w(p + "ffn_up_exps.weight", (E, F, c.n_embd))
                L["e_down"] = w(p + "ffn_down_exps.weight", (E, c.n_embd, F))
                L["router_b"] = opt(p + "ffn_gate_inp.bias", (E,))
                L["e_gate_b"] = opt(p + "ffn_gate_exps.bias", (E, F))
                L["e_up_b"] = opt(p + "ffn_up_exps.bias", (E, F))
                L["e_down_b"] = opt(p + "ffn_down_exps.bias", (E, c.n_embd))
            else:
                L["w_gate"] = w(p + "ffn_gate.weight", (c.n_ff, c.n_embd))
                L["w_up"] = w(p + "ffn_up.weight", (c.n_ff, c.n_embd))
                L["w_down"] = w(p + "ffn_down.weight", (c.n_embd, c.n_ff))
            if c.arch == "gpt-oss" and L["sinks"] is None:
                raise GGUFError("tensor '%sattn_sinks.weight' missing (gpt-oss)" % p)
            if c.arch in ("qwen3", "qwen3moe") and (L["q_norm"] is None or L["k_norm"] is None):
                raise GGUFError("tensor '%sattn_q_norm.weight'/'attn_k_norm.weight' missing (qwen3)" % p)
            self.layers.append(L)
        # Inverse frequencies of the rotated pairs: base^(-2i/n_rot) / freq_factor[i].
        i = np.arange(c.n_rot // 2, dtype=np.float64)
        inv = c.rope_base ** (-2.0 * i / c.n_rot)
        if self.rope_freqs is not None:
            inv = inv / self.rope_freqs
        self.rope_mscale = 1.0
        if c.yarn is not None:
            # YaRN: low-frequency pairs are interpolated (frequency / factor),
            # high-frequency ones kept, a linear ramp between the dims whose
            # wavelength fits beta_fast and beta_slow times into the
            # original context.
            y = c.yarn

            def corr_dim(beta):
                return c.n_rot * math.log(y["orig"] / (beta * 2 * math.pi)) / (2 * math.log(c.rope_base))
            lo, hi = corr_dim(y["beta_fast"]), corr_dim(y["beta_slow"])
            if y["truncate"]:
                lo, hi = math.floor(lo), math.ceil(hi)
            lo, hi = max(lo, 0), min(hi, c.n_rot - 1)
            if hi == lo:
                hi += 0.001
            keep = 1.0 - np.clip((i - lo) / (hi - lo), 0.0, 1.0)     # 1: extrapolate
            inv = inv / y["factor"] * (1.0 - keep) + inv * keep
            self.rope_mscale = y["attn_factor"] * (0.1 * math.log(y["factor"]) + 1.0)
        self.inv_freq = inv / c.rope_scale   # linear scaling divides positions

    # ---- building blocks (float64) ----
    def rmsnorm(self, x, w):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.cfg.rms_eps) * w

    def rope(self, x, pos):
        """x: (n_tok, n_heads, head_dim); pos: (n_tok,) ints. Rotates the
        first n_rot dims of every head; the rest pass through."""
        c = self.cfg
        half = c.n_rot // 2
        ang = pos.astype(np.float64)[:, None] * self.inv_freq[None, :]   # (n_tok, half)
        cos = np.cos(ang)[:, None, :] * self.rope_mscale
        sin = np.sin(ang)[:, None, :] * self.rope_mscale
        y = x.copy()
        if c.rope_neox:
            a, b = x[..., 0:half], x[..., half:c.n_rot]
            y[..., 0:half] = a * cos - b * sin
            y[..., half:c.n_rot] = a * sin + b * cos
        else:
            a, b = x[..., 0:c.n_rot:2], x[..., 1:c.n_rot:2]
            y[..., 0:c.n_rot:2] = a * cos - b * sin
            y[..., 1:c.n_rot:2] = a * sin + b * cos
        return y

    def route(self, h, L):
        """Router of one MoE layer for rows h (n, n_embd): (experts, weights),
        each (n, k), experts in descending probability (ties: lower index)."""
        c = self.cfg
        logits = h @ L["router"].T                                     # (n, E)
        if L.get("router_b") is not None:
            logits = logits + L["router_b"]
        if c.arch == "gpt-oss":
            # top-k of the logits (ties: lower index), softmax over those k
            sel = np.argsort(-logits, axis=-1, kind="stable")[:, :c.n_expert_used]
            z = np.take_along_axis(logits, sel, axis=-1)
            ez = np.exp(z - z.max(axis=-1, keepdims=True))
            return sel, ez / ez.sum(axis=-1, keepdims=True)
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        p = p / p.sum(axis=-1, keepdims=True)                          # softmax over all experts
        # stable sort of -p keeps the lower index first among equal values
        sel = np.argsort(-p, axis=-1, kind="stable")[:, :c.n_expert_used]
        w = np.take_along_axis(p, sel, axis=-1)
        if c.expert_norm:
            w = w / w.sum(axis=-1, keepdims=True)
        return sel, w

    def moe(self, h, L):
        """The MoE FFN, every token through its own experts, one at a time."""
        sel, wts = self.route(h, L)
        out = np.zeros_like(h)
        oss = self.cfg.arch == "gpt-oss"
        for t in range(h.shape[0]):
            for e, wt in zip(sel[t], wts[t]):
                g = L["e_gate"][e] @ h[t]
                u = L["e_up"][e] @ h[t]
                if L.get("e_gate_b") is not None:
                    g = g + L["e_gate_b"][e]
                if L.get("e_up_b") is not None:
                    u = u + L["e_up_b"][e]
                if oss:   # clamped SwiGLU: gate from above, up both ways, up + 1
                    g = np.minimum(g, GPTOSS_LIMIT)
                    u = np.clip(u, -GPTOSS_LIMIT, GPTOSS_LIMIT)
                    a = g / (1.0 + np.exp(-GPTOSS_ALPHA * g)) * (u + 1.0)
                else:
                    a = g / (1.0 + np.exp(-g)) * u
                y = L["e_down"][e] @ a
                if L.get("e_down_b") is not None:
                    y = y + L["e_down_b"][e]
                out[t] += wt * y
        return out

    def route_margin(self, tokens):
        """Smallest gap, over the tokens and MoE layers of one causal pass,
        between the k-th and (k+1)-th largest router logits: how far the
        routing is from a tie (an engine whose activations differ by more
        than this may pick another expert)."""
        gaps = []
        moe = self.moe

        def watch(h, L):
            lg = h @ L["router"].T
            if L.get("router_b") is not None:
                lg = lg + L["router_b"]
            s = np.sort(lg, axis=-1)[:, ::-1]
            k = self.cfg.n_expert_used
            if k < s.shape[1]:
                gaps.append(float((s[:, k - 1] - s[:, k]).min()))
            return moe(h, L)
        self.moe = watch
        try:
            self.forward(list(tokens))
        finally:
            del self.moe
        return min(gaps) if gaps else float("inf")

    def new_cache(self):
        c = self.cfg
        return {"n": 0,
                "k": [np.zeros((0, c.n_head_kv, c.head_dim)) for _ in range(c.n_layer)],
                "v": [np.zeros((0, c.n_head_kv, c.head_dim_v)) for _ in range(c.n_layer)]}

    def forward(self, tokens, cache=None, hidden=False):
        """Runs `tokens` (a list of ids) at positions cache.n, cache.n+1, ...
        Returns logits (len(tokens), n_vocab) float64 and extends the cache;
        with hidden=True the final hidden states after the output norm
        (len(tokens), n_embd) instead."""
        c = self.cfg
        if cache is None:
            cache = self.new_cache()
        toks = np.asarray(tokens, dtype=np.int64)
        if toks.ndim != 1 or toks.size == 0:
            raise ValueError("forward: need a non-empty list of token ids")
        if toks.min() < 0 or toks.max() >= c.n_vocab:
            raise ValueError("forward: token id out of range [0, %d)" % c.n_vocab)
        n = toks.size
        p0 = cache["n"]
        pos = np.arange(p0, p0 + n)
        x = self.tok_embd[toks]                                        # (n, n_embd)
        group = c.n_head // c.n_head_kv
        scale = 1.0 / np.sqrt(c.head_dim)
        # causal mask over [cached + new] keys: query t sees keys <= p0 + t
        kpos = np.arange(p0 + n)
        mask = kpos[None, :] <= pos[:, None]                           # (n, p0+n)
        for li, L in enumerate(self.layers):
            h = self.rmsnorm(x, L["attn_norm"])
            q = h @ L["wq"].T
            k = h @ L["wk"].T
            v = h @ L["wv"].T
            if L["bq"] is not None:
                q = q + L["bq"]
            if L["bk"] is not None:
                k = k + L["bk"]
            if L["bv"] is not None:
                v = v + L["bv"]
            q = q.reshape(n, c.n_head, c.head_dim)
            k = k.reshape(n, c.n_head_kv, c.head_dim)
            v = v.reshape(n, c.n_head_kv, c.head_dim_v)
            if L["q_norm"] is not None:
                q = self.rmsnorm(q, L["q_norm"])
            if L["k_norm"] is not None:
                k = self.rmsnorm(k, L["k_norm"])
            q = self.rope(q, pos)
            k = self.rope(k, pos)
            if self.kv_f16:  # the cache stores IEEE half, round-to-nearest-even
                k = k.astype(np.float16).astype(np.float64)
                v = v.astype(np.float16).astype(np.float64)
            K = cache["k"][li] = np.concatenate([cache["k"][li], k], axis=0)  # (T, n_kv, hd)
            V = cache["v"][li] = np.concatenate([cache["v"][li], v], axis=0)
            # query head hh uses kv head hh // group
            Kh = np.repeat(K, group, axis=1).transpose(1, 0, 2)        # (n_head, T, hd)
            Vh = np.repeat(V, group, axis=1).transpose(1, 0, 2)        # (n_head, T, hdv)
            qh = q.transpose(1, 0, 2)                                  # (n_head, n, hd)
            s = (qh @ Kh.transpose(0, 2, 1)) * scale                   # (n_head, n, T)
            lm = mask
            if L["window"]:   # query at p sees keys p - window + 1 .. p
                lm = mask & (kpos[None, :] > pos[:, None] - L["window"])
            s = np.where(lm[None, :, :], s, -np.inf)
            mx = s.max(axis=-1, keepdims=True)
            if L["sinks"] is not None:   # the sink joins the max and the denominator
                mx = np.maximum(mx, L["sinks"][:, None, None])
            e = np.exp(s - mx)
            den = e.sum(axis=-1, keepdims=True)
            if L["sinks"] is not None:
                den = den + np.exp(L["sinks"][:, None, None] - mx)
            p = e / den
            o = (p @ Vh).transpose(1, 0, 2).reshape(n, c.n_head * c.head_dim_v)
            o = o @ L["wo"].T
            if L["bo"] is not None:
                o = o + L["bo"]
            x = x + o
            h = self.rmsnorm(x, L["ffn_norm"])
            if c.n_expert:
                x = x + self.moe(h, L)
                continue
            gte = h @ L["w_gate"].T
            up = h @ L["w_up"].T
            act = gte / (1.0 + np.exp(-gte)) * up                      # silu(gate) * up
            x = x + act @ L["w_down"].T
        cache["n"] = p0 + n
        x = self.rmsnorm(x, self.out_norm)
        return x if hidden else x @ self.output.T

    def greedy(self, prompt, n_new, stop_ids=()):
        """Greedy decoding: returns the generated ids (at most n_new), stopping
        before any id in stop_ids (which is not included)."""
        cache = self.new_cache()
        logits = self.forward(list(prompt), cache)[-1]
        out = []
        for _ in range(n_new):
            nxt = int(np.argmax(logits))
            if nxt in stop_ids:
                break
            out.append(nxt)
            if len(out) == n_new:
                break
            logits = self.forward([nxt], cache)[-1]
        return out


# ---------------------------------------------------------------------------
# Encoders (bert) and pooled embeddings
# ---------------------------------------------------------------------------

POOL_NONE, POOL_MEAN, POOL_CLS, POOL_LAST = 0, 1, 2, 3
_erf = np.frompyfunc(math.erf, 1, 1)


class BertModel:
    """A BERT encoder (bge, all-MiniLM) in float64, from the BERT paper's
    post-norm block: x = LN(x + attn(x)); x = LN(x + ffn(x)), exact-erf GELU,
    learned absolute positions and token types (all type 0), attention over
    the whole sequence (no mask: one sequence at a time)."""

    def __init__(self, g):
        a = "bert"
        if g.get("general.architecture") != a:
            raise GGUFError("general.architecture: not 'bert'")
        self.n_embd = g.get_int(a + ".embedding_length")
        self.n_head = g.get_int(a + ".attention.head_count")
        self.n_layer = g.get_int(a + ".block_count")
        self.n_ff = g.get_int(a + ".feed_forward_length")
        self.n_ctx = g.get_int(a + ".context_length")
        self.eps = g.get_float(a + ".attention.layer_norm_epsilon", 1e-12)
        self.pooling = g.get_int(a + ".pooling_type", POOL_MEAN)
        D, F = self.n_embd, self.n_ff

        def t(name, shape):
            if name not in g.tensors:
                raise GGUFError("tensor '%s' missing" % name)
            x = g.tensor(name).astype(np.float64)
            if x.shape != shape:
                raise GGUFError("tensor '%s': shape %s, expected %s" % (name, x.shape, shape))
            return x

        self.tok = g.tensor("token_embd.weight").astype(np.float64)
        self.n_vocab = self.tok.shape[0]
        self.pos = g.tensor("position_embd.weight").astype(np.float64)
        self.types = g.tensor("token_types.weight").astype(np.float64)
        self.ln_e = (t("token_embd_norm.weight", (D,)), t("token_embd_norm.bias", (D,)))
        self.layers = []
        for i in range(self.n_layer):
            p = "blk.%d." % i
            L = {}
            for nm in ("attn_q", "attn_k", "attn_v", "attn_output"):
                L[nm] = (t(p + nm + ".weight", (D, D)), t(p + nm + ".bias", (D,)))
            L["up"] = (t(p + "ffn_up.weight", (F, D)), t(p + "ffn_up.bias", (F,)))
            L["down"] = (t(p + "ffn_down.weight", (D, F)), t(p + "ffn_down.bias", (D,)))
            L["ln1"] = (t(p + "attn_output_norm.weight", (D,)), t(p + "attn_output_norm.bias", (D,)))
            L["ln2"] = (t(p + "layer_output_norm.weight", (D,)), t(p + "layer_output_norm.bias", (D,)))
            self.layers.append(L)

    def layernorm(self, x, wb):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * wb[0] + wb[1]

    def hidden(self, tokens):
        toks = np.asarray(tokens, dtype=np.int64)
        n = toks.size
        if n == 0 or n > self.n_ctx or toks.min() < 0 or toks.max() >= self.n_vocab:
            raise ValueError("bert: need 1..%d token ids in [0, %d)" % (self.n_ctx, self.n_vocab))
        x = self.layernorm(self.tok[toks] + self.pos[:n] + self.types[0], self.ln_e)
        H, hd = self.n_head, self.n_embd // self.n_head
        for L in self.layers:
            q, k, v = (x @ L[nm][0].T + L[nm][1] for nm in ("attn_q", "attn_k", "attn_v"))
            q, k, v = (a.reshape(n, H, hd).transpose(1, 0, 2) for a in (q, k, v))
            s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)                  # (H, n, n)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            o = ((s / s.sum(axis=-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(n, self.n_embd)
            x = self.layernorm(x + o @ L["attn_output"][0].T + L["attn_output"][1], L["ln1"])
            u = x @ L["up"][0].T + L["up"][1]
            gelu = 0.5 * u * (1.0 + _erf(u / math.sqrt(2.0)).astype(np.float64))
            x = self.layernorm(x + gelu @ L["down"][0].T + L["down"][1], L["ln2"])
        return x


def pool(h, pooling):
    """One embedding from hidden states (n, n_embd), L2-normalised."""
    if pooling == POOL_MEAN:
        v = h.mean(axis=0)
    elif pooling == POOL_CLS:
        v = h[0]
    elif pooling == POOL_LAST:
        v = h[-1]
    else:
        raise ValueError("pooling_type %r is not an embedding pooling" % pooling)
    return v / np.linalg.norm(v)


def embed(g, tokens):
    """The normalised embedding of one sequence: bert by its pooling_type
    (mean when absent), decoders by theirs (last token when absent)."""
    arch = g.get("general.architecture")
    if arch == "bert":
        m = BertModel(g)
        return pool(m.hidden(tokens), m.pooling)
    m = Model(g, kv_f16=True)
    return pool(m.forward(list(tokens), hidden=True), g.get_int(arch + ".pooling_type", POOL_LAST))


# ---------------------------------------------------------------------------
# Fixture text format
# ---------------------------------------------------------------------------

def write_logits(path, tokens, logits):
    """Line 1: `n_tokens n_vocab`; line 2: the token ids; then one line of
    n_vocab logits (%.8e) per position."""
    with open(path, "w") as f:
        f.write("%d %d\n" % (len(tokens), logits.shape[1]))
        f.write(" ".join(str(t) for t in tokens) + "\n")
        for row in logits:
            f.write(" ".join("%.8e" % v for v in row) + "\n")


def write_logits_tail(path, tokens, logits, n_rows):
    """Long prompts: line 1 `n_tokens n_vocab n_rows`, line 2 the token
    ids, then the logits of the last n_rows positions, one line each."""
    with open(path, "w") as f:
        f.write("%d %d %d\n" % (len(tokens), logits.shape[1], n_rows))
        f.write(" ".join(str(t) for t in tokens) + "\n")
        for row in logits[-n_rows:]:
            f.write(" ".join("%.8e" % v for v in row) + "\n")


def read_logits(path):
    """Inverse of write_logits: (tokens list, logits float64 array)."""
    with open(path) as f:
        n, nv = (int(x) for x in f.readline().split())
        toks = [int(x) for x in f.readline().split()]
        rows = [np.array(f.readline().split(), dtype=np.float64) for _ in range(n)]
    if len(toks) != n or any(r.size != nv for r in rows):
        raise ValueError("%s: malformed logits fixture" % path)
    return toks, np.stack(rows)


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------

def _fmt_value(vt, v):
    if vt == VT_ARRAY:
        et, items = v
        n = len(items)
        if et == VT_STRING:
            head = ", ".join(repr(s) for s in items[:4])
        elif et == VT_ARRAY:
            head = "..."
        else:
            head = ", ".join(str(x) for x in list(items[:4]))
        return "[%s x %d] %s%s" % (VT_NAMES.get(et, "?"), n, head, ", ..." if n > 4 else "")
    if vt == VT_STRING:
        return repr(v if len(v) <= 80 else v[:77] + "...")
    return str(v)


def cmd_info(args):
    g = GGUFFile(args.model)
    print("version %d, alignment %d, data offset %d, file size %d"
          % (g.version, g.alignment, g.data_offset, g.file_size))
    print("%d metadata keys:" % len(g.kv))
    for k, (vt, v) in g.kv.items():
        print("  %-48s %-4s %s" % (k, VT_NAMES[vt], _fmt_value(vt, v)))
    print("%d tensors:" % len(g.tensors))
    for name in g.tensor_names:
        t = g.tensors[name]
        print("  %-36s %-5s %-20s offset %d bytes %d"
              % (name, t.type_name, "x".join(str(d) for d in t.dims), t.offset, t.n_bytes))
    if "general.architecture" in g.kv and "token_embd.weight" in g.tensors:
        try:
            print(Config(g).describe())
        except GGUFError as e:
            print("config: %s" % e)
    return 0


def _parse_tokens(s):
    try:
        toks = [int(x) for x in s.replace(",", " ").split()]
    except ValueError:
        raise SystemExit("--tokens: expected space-separated integers, got %r" % s)
    if not toks:
        raise SystemExit("--tokens: empty")
    return toks


def cmd_logits(args):
    m = Model(args.model, kv_f16=args.kv_f16)
    toks = _parse_tokens(args.tokens)
    logits = m.forward(toks)
    if args.last:
        write_logits_tail(args.out, toks, logits, min(args.last, len(toks)))
    else:
        write_logits(args.out, toks, logits)
    return 0


def cmd_margin(args):
    m = Model(args.model, kv_f16=args.kv_f16)
    print("%.6f" % m.route_margin(_parse_tokens(args.tokens)))
    return 0


def cmd_greedy(args):
    m = Model(args.model, kv_f16=args.kv_f16)
    toks = _parse_tokens(args.tokens)
    stop = () if m.cfg.eos_id is None else (m.cfg.eos_id,)
    gen = m.greedy(toks, args.n, stop)
    print(" ".join(str(t) for t in toks + gen))
    return 0


def cmd_embed(args):
    g = GGUFFile(args.model)
    for line in args.tokens:
        print(" ".join("%.9e" % v for v in embed(g, _parse_tokens(line))))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="numpy reference for GGUF Llama-family models")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("info", help="print metadata, tensors and the model config")
    p.add_argument("model")
    p = sub.add_parser("logits", help="write the logits of every position to a text fixture")
    p.add_argument("model")
    p.add_argument("--tokens", required=True, help='token ids, e.g. "1 5 9"')
    p.add_argument("--out", required=True)
    p.add_argument("--kv-f16", action="store_true",
                   help="round K and V to float16 as they enter the KV cache")
    p.add_argument("--last", type=int, default=0,
                   help="write only the last N positions (line 1 gains N: write_logits_tail)")
    p = sub.add_parser("greedy", help="print prompt ids + N greedy ids (stops before EOS)")
    p.add_argument("model")
    p.add_argument("--tokens", required=True)
    p.add_argument("-n", type=int, required=True)
    p.add_argument("--kv-f16", action="store_true",
                   help="round K and V to float16 as they enter the KV cache")
    p = sub.add_parser("embed", help="print the normalised pooled embedding of each --tokens sequence")
    p.add_argument("model")
    p.add_argument("--tokens", required=True, action="append", help='token ids of one input (repeatable)')
    p = sub.add_parser("margin", help="print the smallest router top-k gap of a MoE model over a prompt")
    p.add_argument("model")
    p.add_argument("--tokens", required=True)
    p.add_argument("--kv-f16", action="store_true")
    args = ap.parse_args(argv)
    try:
        return {"info": cmd_info, "logits": cmd_logits, "greedy": cmd_greedy, "embed": cmd_embed,
                "margin": cmd_margin}[args.cmd](args)
    except (GGUFError, ValueError, OSError) as e:
        print("gguf_ref: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
