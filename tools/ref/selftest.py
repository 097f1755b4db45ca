#!/usr/bin/python3
"""selftest.py -- checks the numpy reference (gguf_ref.py) against things it
cannot have got from itself:

  * dequantisers against blocks written byte by byte with values worked out
    by hand from the ggml block layouts, and against randomly packed blocks
    whose logical contents (scales, mins, quants) are known;
  * the GGUF parser on files with every metadata type, v2 and v3, custom
    alignment, every truncation and several malformed headers, and on the
    real vocabulary files in ../shared/vocab;
  * the forward pass against a second, deliberately naive implementation
    (python loops, no cache) on random llama / llama3 / qwen2 / qwen3 models
    of every weight type, against itself with a KV cache, and the llama
    (NORM rope on permuted Q/K) == NEOX equivalence that GGUF conversion
    relies on;
  * stories260K.gguf greedy outputs against ../shared/models/expected_greedy.json.

Prints one line per failure and ends with `N passed, N failed`; exit 1 on
any failure. Run: /usr/bin/python3 tools/ref/selftest.py [--quick]
[--fixtures MODEL_DIR] (also compare tests/fixtures/ref/*.logits with the
reference run on the regenerated fixture models in MODEL_DIR) [--fail MSG]
(count one failure, for the calling script).
"""

import json
import math
import os
import struct
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_ref as R  # noqa: E402
import gguf_write as W  # noqa: E402

N_PASS = 0
N_FAIL = 0


def check(cond, what):
    global N_PASS, N_FAIL
    if cond:
        N_PASS += 1
    else:
        N_FAIL += 1
        print("FAIL: %s" % what)
    return cond


def check_close(a, b, tol, what):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return check(False, "%s: shape %s vs %s" % (what, a.shape, b.shape))
    err = float(np.max(np.abs(a - b))) if a.size else 0.0
    return check(err <= tol, "%s: max abs err %.3g > %.3g" % (what, err, tol))


def shared_dir():
    s = os.environ.get("KVLOOM_SHARED")
    if s:
        return s
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "shared"))


# ---------------------------------------------------------------------------
# Dequantisers: literal bytes, values computed by hand
# ---------------------------------------------------------------------------


def test_deq_literal():
    # F16: 0x3C00 = 1.0, 0xC000 = -2.0, 0x7BFF = 65504 (max), 0x0001 = 2^-24.
    raw = np.frombuffer(struct.pack("<4H", 0x3C00, 0xC000, 0x7BFF, 0x0001), np.uint8)
    check_close(R.dequantize(R.T_F16, raw), [1.0, -2.0, 65504.0, 2.0 ** -24], 0, "F16 literal")
    # BF16: 0x3F80 = 1.0, 0xC040 = -3.0, 0x4049 = 3.140625.
    raw = np.frombuffer(struct.pack("<3H", 0x3F80, 0xC040, 0x4049), np.uint8)
    check_close(R.dequantize(R.T_BF16, raw), [1.0, -3.0, 3.140625], 0, "BF16 literal")
    # F32
    raw = np.frombuffer(struct.pack("<2f", 1.5, -0.25), np.uint8)
    check_close(R.dequantize(R.T_F32, raw), [1.5, -0.25], 0, "F32 literal")

    # Q8_0: d = 0.5 (f16 0x3800); qs = -128, -1, 0, 1, 127, then 0.
    qs = [-128, -1, 0, 1, 127] + [0] * 27
    raw = np.frombuffer(struct.pack("<H32b", 0x3800, *qs), np.uint8)
    y = R.dequantize(R.T_Q8_0, raw)
    check_close(y[:5], [-64.0, -0.5, 0.0, 0.5, 63.5], 0, "Q8_0 literal")
    check(y.size == 32, "Q8_0 literal: 32 values")

    # Q4_0: d = 2.0 (0x4000). byte 0 = 0x21 -> y[0] = (1-8)*2, y[16] = (2-8)*2;
    # byte 15 = 0xF0 -> y[15] = (0-8)*2, y[31] = (15-8)*2; others 0x88 -> 0.
    qs = [0x21] + [0x88] * 14 + [0xF0]
    raw = np.frombuffer(struct.pack("<H16B", 0x4000, *qs), np.uint8)
    y = R.dequantize(R.T_Q4_0, raw)
    exp = np.zeros(32)
    exp[0], exp[16], exp[15], exp[31] = -14.0, -12.0, -16.0, 14.0
    check_close(y, exp, 0, "Q4_0 literal")

    # Q4_K: d = 1.0 (0x3C00), dmin = 0.5 (0x3800).
    # scales bytes 0..3 = 41 02 83 C4 -> sc[0..3] = 1,2,3,4; top bits 1,0,2,3
    # bytes 8..11 = 51 62 73 84 -> sc[4..7] = 1|16, 2|0, 3|32, 4|48 = 17,2,35,52
    # bytes 4..7 = 05 46 87 08 -> m[0..3] = 5,6,7,8; top bits 0,1,2,0
    #   m[4..7] = 5|0, 6|16, 7|32, 8|0 = 5,22,39,8 (high nibbles of bytes 8..11)
    scales = bytes([0x41, 0x02, 0x83, 0xC4, 0x05, 0x46, 0x87, 0x08, 0x51, 0x62, 0x73, 0x84])
    sc = [1, 2, 3, 4, 17, 2, 35, 52]
    m = [5, 6, 7, 8, 5, 22, 39, 8]
    qs = bytearray(128)
    qs[0] = 0x9A      # sub-block 0 elem 0 = 10, sub-block 1 elem 0 = 9
    qs[127] = 0xF3    # sub-block 6 elem 31 = 3, sub-block 7 elem 31 = 15
    raw = np.frombuffer(struct.pack("<2H", 0x3C00, 0x3800) + scales + bytes(qs), np.uint8)
    y = R.dequantize(R.T_Q4_K, raw)
    exp = np.repeat([-0.5 * mj for mj in m], 32)
    exp[0] = sc[0] * 10 - 0.5 * m[0]
    exp[32] = sc[1] * 9 - 0.5 * m[1]
    exp[223] = sc[6] * 3 - 0.5 * m[6]
    exp[255] = sc[7] * 15 - 0.5 * m[7]
    check_close(y, exp, 0, "Q4_K literal")
    check(W.pack_k_scales(sc, m).tobytes() == scales, "pack_k_scales matches the literal bytes")
    check(y[0] == 7.5 and y[32] == 15.0 and y[223] == 85.5 and y[255] == 776.0,
          "Q4_K literal spot values")

    # Q5_K: same scales and nibbles, qh[0] = 0x03 (fifth bit of elem 0 of
    # sub-blocks 0 and 1), qh[31] = 0x80 (elem 31 of sub-block 7).
    qh = bytearray(32)
    qh[0], qh[31] = 0x03, 0x80
    raw = np.frombuffer(struct.pack("<2H", 0x3C00, 0x3800) + scales + bytes(qh) + bytes(qs),
                        np.uint8)
    y = R.dequantize(R.T_Q5_K, raw)
    exp[0] = sc[0] * 26 - 0.5 * m[0]
    exp[32] = sc[1] * 25 - 0.5 * m[1]
    exp[255] = sc[7] * 31 - 0.5 * m[7]
    check_close(y, exp, 0, "Q5_K literal")
    check(y[0] == 23.5 and y[32] == 47.0 and y[255] == 1608.0, "Q5_K literal spot values")

    # Q6_K: d = 0.5. ql[0] = 0x21: low nibble 1 -> elem 0, high nibble 2 ->
    # elem 64. qh[0] = 0xE4 = 0b11100100: elem 0 high bits 0, elem 32: 1,
    # elem 64: 2, elem 96: 3. ql[32] = 0 -> elem 32 = 16, elem 96 = 48.
    # Second half: ql[64+5] = 0x0F -> elem 133 = 15, elem 197 = 0; qh[37] = 0.
    ql = bytearray(128)
    qh6 = bytearray(64)
    ql[0], qh6[0], ql[69] = 0x21, 0xE4, 0x0F
    sc6 = [1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12, 13, -14, 15, -128]
    raw = np.frombuffer(bytes(ql) + bytes(qh6) + struct.pack("<16b", *sc6) +
                        struct.pack("<H", 0x3800), np.uint8)
    y = R.dequantize(R.T_Q6_K, raw)
    exp = np.array([0.5 * sc6[i // 16] * -32 for i in range(256)])
    exp[0] = 0.5 * 1 * (1 - 32)
    exp[32] = 0.5 * 3 * (16 - 32)
    exp[64] = 0.5 * 5 * (2 + 32 - 32)
    exp[96] = 0.5 * 7 * (48 - 32)
    exp[133] = 0.5 * 9 * (15 - 32)
    check_close(y, exp, 0, "Q6_K literal")
    check(y[0] == -15.5 and y[255] == 2048.0, "Q6_K literal spot values")

    # MXFP4 (OCP MX spec): e = 129 -> scale 2^2. Nibbles, written out:
    # 0x0 = +0, 0x1 = +0.5 (subnormal), 0x2 = 1.0, 0x3 = 1.5, 0x5 = 3.0,
    # 0x7 = 6.0 (largest), 0x9 = -0.5, 0xE = -4.0, 0xF = -6.0.
    # byte 0 = 0xF1: elem 0 = 0.5*4, elem 16 = -6*4; byte 1 = 0x37: elem 1 =
    # 6*4, elem 17 = 1.5*4; byte 15 = 0xE9: elem 15 = -0.5*4, elem 31 = -4*4;
    # byte 2 = 0x52: elem 2 = 1*4, elem 18 = 3*4. Second block: e = 0 ->
    # 2^-127 (a subnormal float32), byte 0 = 0x07 -> elem 0 = 6 * 2^-127.
    qs = [0xF1, 0x37, 0x52] + [0x00] * 12 + [0xE9]
    raw = np.frombuffer(bytes([129] + qs + [0, 0x07] + [0] * 15), np.uint8)
    y = R.dequantize(R.T_MXFP4, raw)
    exp = np.zeros(64)
    exp[0], exp[16], exp[1], exp[17] = 2.0, -24.0, 24.0, 6.0
    exp[15], exp[31], exp[2], exp[18] = -2.0, -16.0, 4.0, 12.0
    exp[32] = 6.0 * 2.0 ** -127
    check_close(y, exp, 0, "MXFP4 literal")
    check(y[32] == np.float32(6.0 * 2.0 ** -127) and y[32] > 0, "MXFP4 subnormal scale")

    # Unsupported type and partial blocks are errors, not crashes.
    for t, nbytes in ((R.T_Q4_K, 143), (R.T_Q8_0, 35), (R.T_MXFP4, 16)):
        try:
            R.dequantize(t, np.zeros(nbytes, np.uint8))
            check(False, "partial block of type %d accepted" % t)
        except R.GGUFError:
            check(True, "")
    try:
        R.dequantize(3, np.zeros(20, np.uint8))
        check(False, "Q4_1 accepted")
    except R.GGUFError:
        check(True, "")


# ---------------------------------------------------------------------------
# Dequantisers: random blocks with known logical contents
# ---------------------------------------------------------------------------


def test_deq_packed(rng):
    nb = 6
    f16 = lambda x: float(np.float16(x))  # noqa: E731
    # Q8_0
    raw, exp = b"", []
    for _ in range(nb):
        d = f16(rng.uniform(-2, 2))
        q = rng.integers(-128, 128, 32)
        raw += W.pack_q8_0(d, q)
        exp += [d * v for v in q]
    check_close(R.dequantize(R.T_Q8_0, np.frombuffer(raw, np.uint8)), exp, 0, "Q8_0 packed")
    # Q4_0
    raw, exp = b"", []
    for _ in range(nb):
        d = f16(rng.uniform(-2, 2))
        q = rng.integers(0, 16, 32)
        raw += W.pack_q4_0(d, q)
        exp += [d * (v - 8) for v in q]
    check_close(R.dequantize(R.T_Q4_0, np.frombuffer(raw, np.uint8)), exp, 0, "Q4_0 packed")
    # Q4_K / Q5_K: y = d*sc[j]*q - dmin*m[j]; float32 rounding of the
    # product/difference allowed (tolerance relative to the magnitudes).
    for t, qmax, pack in ((R.T_Q4_K, 15, W.pack_q4_k), (R.T_Q5_K, 31, W.pack_q5_k)):
        raw, exp, mag = b"", [], []
        for _ in range(nb):
            d, dmin = f16(rng.uniform(0, 0.1)), f16(rng.uniform(0, 0.1))
            sc, m = rng.integers(0, 64, 8), rng.integers(0, 64, 8)
            q = rng.integers(0, qmax + 1, 256)
            raw += pack(d, dmin, sc, m, q)
            for i in range(256):
                j = i // 32
                exp.append(d * sc[j] * q[i] - dmin * m[j])
                mag.append(d * sc[j] * q[i] + dmin * m[j])
        y = R.dequantize(t, np.frombuffer(raw, np.uint8))
        err = np.abs(y - np.array(exp)) / np.maximum(np.array(mag), 1e-30)
        check(y.size == 256 * nb and float(err.max()) < 1.2e-7,
              "%s packed: rel err %.3g" % (R.GGML_TYPES[t][0], float(err.max())))
    # Q6_K: y = d*sc[i//16]*q[i]
    raw, exp = b"", []
    for _ in range(nb):
        d = f16(rng.uniform(-0.05, 0.05))
        sc = rng.integers(-128, 128, 16)
        q = rng.integers(-32, 32, 256)
        raw += W.pack_q6_k(d, sc, q)
        exp += [d * sc[i // 16] * q[i] for i in range(256)]
    y = R.dequantize(R.T_Q6_K, np.frombuffer(raw, np.uint8))
    exp = np.array(exp)
    check_close(y, exp, 1.2e-7 * float(np.abs(exp).max()), "Q6_K packed")

    # MXFP4: random E8M0 scales (all 255 non-NaN codes over the blocks) and
    # nibbles; the expected values from the E2M1 value list of the OCP spec.
    e2m1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    raw, exp = b"", []
    for blk in range(255):
        q = rng.integers(0, 16, 32)
        raw += bytes([blk]) + bytes(int(q[j]) | int(q[j + 16]) << 4 for j in range(16))
        exp += [e2m1[v] * 2.0 ** (blk - 127) for v in q]
    y = R.dequantize(R.T_MXFP4, np.frombuffer(raw, np.uint8))
    with np.errstate(over="ignore"):  # 3 * 2^127 and up overflow float32 in both
        check(np.array_equal(y, np.array(exp, dtype=np.float32)), "MXFP4 packed (every scale)")

    # Quantisers round-trip within half a quantisation step (checks the test
    # writer, which every model test below relies on).
    x = rng.standard_normal(4 * 256).astype(np.float32)
    for t, step in ((R.T_Q8_0, 2 / 127), (R.T_Q4_0, 2 / 7), (R.T_Q4_K, 2 / 15),
                    (R.T_Q5_K, 2 / 31), (R.T_Q6_K, 2 / 31)):
        y = R.dequantize(t, np.frombuffer(W.quantize(t, x), np.uint8))
        rel = float(np.max(np.abs(y - x))) / float(np.max(np.abs(x)))
        check(rel < step, "%s round trip: rel err %.3g" % (R.GGML_TYPES[t][0], rel))
    y = R.dequantize(R.T_F16, np.frombuffer(W.quantize(R.T_F16, x), np.uint8))
    check_close(y, x.astype(np.float16), 0, "F16 round trip")
    y = R.dequantize(R.T_BF16, np.frombuffer(W.quantize(R.T_BF16, x), np.uint8))
    check(float(np.max(np.abs(y - x) / np.abs(x))) <= 2.0 ** -8, "BF16 round trip")


# ---------------------------------------------------------------------------
# GGUF parser
# ---------------------------------------------------------------------------


def _metadata_writer(version, alignment):
    w = W.GGUFWriter(version=version, alignment=alignment)
    w.add("k.u8", R.VT_UINT8, 200)
    w.add("k.i8", R.VT_INT8, -100)
    w.add("k.u16", R.VT_UINT16, 60000)
    w.add("k.i16", R.VT_INT16, -30000)
    w.add("k.u32", R.VT_UINT32, 4000000000)
    w.add("k.i32", R.VT_INT32, -2000000000)
    w.add("k.f32", R.VT_FLOAT32, 0.25)
    w.add("k.bool", R.VT_BOOL, True)
    w.add("k.str", R.VT_STRING, "héllo")
    w.add("k.u64", R.VT_UINT64, 2 ** 63 + 5)
    w.add("k.i64", R.VT_INT64, -(2 ** 62))
    w.add("k.f64", R.VT_FLOAT64, -1.5e300)
    w.add("k.arr_i32", R.VT_ARRAY, (R.VT_INT32, [1, -2, 3]))
    w.add("k.arr_f32", R.VT_ARRAY, (R.VT_FLOAT32, [0.5, 1.5]))
    w.add("k.arr_str", R.VT_ARRAY, (R.VT_STRING, ["a", "", "xyz"]))
    w.add("k.arr_arr", R.VT_ARRAY, (R.VT_ARRAY, [(R.VT_UINT8, [1, 2]), (R.VT_STRING, ["q"])]))
    w.add("k.arr_empty", R.VT_ARRAY, (R.VT_UINT64, []))
    w.add_tensor("t.f32", R.T_F32, np.arange(6, dtype=np.float32).reshape(2, 3))
    w.add_tensor("t.q8", R.T_Q8_0, np.linspace(-1, 1, 64).reshape(2, 32))
    w.add_tensor("t.vec", R.T_F16, np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    return w


def test_parser():
    for version, alignment in ((3, 32), (2, 32), (3, 64), (3, 1), (2, 256)):
        data = _metadata_writer(version, alignment).to_bytes()
        g = R.GGUFFile.from_bytes(data)
        tag = "v%d align %d" % (version, alignment)
        check(g.version == version and g.alignment == alignment, tag + ": header")
        exp = {"k.u8": 200, "k.i8": -100, "k.u16": 60000, "k.i16": -30000,
               "k.u32": 4000000000, "k.i32": -2000000000, "k.f32": 0.25, "k.bool": True,
               "k.str": "héllo", "k.u64": 2 ** 63 + 5, "k.i64": -(2 ** 62), "k.f64": -1.5e300}
        for k, v in exp.items():
            check(g.get(k) == v and type(g.get(k)) is type(v), "%s: %s = %r" % (tag, k, g.get(k)))
        et, a = g.get("k.arr_i32")
        check(et == R.VT_INT32 and list(a) == [1, -2, 3], tag + ": arr_i32")
        et, a = g.get("k.arr_f32")
        check(et == R.VT_FLOAT32 and list(a) == [0.5, 1.5], tag + ": arr_f32")
        check(g.get("k.arr_str") == (R.VT_STRING, ["a", "", "xyz"]), tag + ": arr_str")
        et, a = g.get("k.arr_arr")
        check(et == R.VT_ARRAY and list(a[0][1]) == [1, 2] and a[1] == (R.VT_STRING, ["q"]),
              tag + ": nested arrays")
        check(g.get("k.arr_empty")[1].size == 0, tag + ": empty array")
        check(g.tensor_names == ["t.f32", "t.q8", "t.vec"], tag + ": tensor order")
        check(g.data_offset % alignment == 0, tag + ": data offset aligned")
        check(all(t.offset % alignment == 0 for t in g.tensors.values()), tag + ": tensor offsets")
        check_close(g.tensor("t.f32"), np.arange(6).reshape(2, 3), 0, tag + ": t.f32")
        check(g.tensors["t.f32"].dims == [3, 2], tag + ": dims innermost first")
        check_close(g.tensor("t.vec"), [1, 2, 3, 4, 5], 0, tag + ": t.vec")
        check_close(g.tensor("t.q8"), np.linspace(-1, 1, 64).reshape(2, 32), 1 / 127,
                    tag + ": t.q8")
    # Every truncation of a small file before the end of its last tensor's
    # data is a GGUFError naming an offset (the padding after it is optional).
    data = _metadata_writer(3, 32).to_bytes()
    g = R.GGUFFile.from_bytes(data)
    end = max(g.data_offset + t.offset + t.n_bytes for t in g.tensors.values())
    check(end < len(data), "test file has trailing padding")
    R.GGUFFile.from_bytes(data[:end])
    bad = 0
    for n in range(end):
        try:
            R.GGUFFile.from_bytes(data[:n])
            bad += 1
        except R.GGUFError as e:
            if "offset" not in str(e) and "magic" not in str(e):
                bad += 1
        except Exception:
            bad += 1
    check(bad == 0, "truncations: %d of %d not rejected cleanly" % (bad, len(data)))

    def rejects(blob, what):
        try:
            R.GGUFFile.from_bytes(blob)
            check(False, what + ": accepted")
        except R.GGUFError:
            check(True, "")

    rejects(b"GGUX" + data[4:], "bad magic")
    rejects(data[:4] + struct.pack("<I", 1) + data[8:], "version 1")
    rejects(data[:4] + struct.pack("<I", 4) + data[8:], "version 4")
    # alignment not a power of two
    w = W.GGUFWriter()
    w.add("general.alignment", R.VT_UINT32, 48)
    rejects(w.to_bytes(), "alignment 48")
    # huge string length / array count / n_dims / unknown tensor type / unaligned offset
    w = W.GGUFWriter()
    w.add_str("a", "abc")
    blob = bytearray(w.to_bytes())
    blob[24:32] = struct.pack("<Q", 2 ** 63)   # key length
    rejects(bytes(blob), "huge key length")
    w = W.GGUFWriter()
    w.add("a", R.VT_ARRAY, (R.VT_UINT32, [1, 2]))
    blob = bytearray(w.to_bytes())
    blob[24 + 8 + 1 + 4 + 4:24 + 8 + 1 + 4 + 4 + 8] = struct.pack("<Q", 2 ** 62)
    rejects(bytes(blob), "huge array count")
    base = W.GGUFWriter()
    base.add_tensor("t", R.T_F32, np.zeros(8))
    good = base.to_bytes()
    R.GGUFFile.from_bytes(good)
    ti = 24 + 8 + 1                            # tensor info: after name "t"
    blob = bytearray(good)
    blob[ti:ti + 4] = struct.pack("<I", 5)
    rejects(bytes(blob), "n_dims 5")
    blob = bytearray(good)
    blob[ti + 4 + 8:ti + 4 + 8 + 4] = struct.pack("<I", 99)
    rejects(bytes(blob), "unknown tensor type")
    blob = bytearray(good)
    blob[ti + 4 + 8 + 4:ti + 4 + 8 + 12] = struct.pack("<Q", 8)
    rejects(bytes(blob), "unaligned tensor offset")
    blob = bytearray(good)
    blob[ti + 4 + 8 + 4:ti + 4 + 8 + 12] = struct.pack("<Q", 32)
    rejects(bytes(blob), "tensor data past end")
    blob = bytearray(good)
    blob[ti + 4:ti + 12] = struct.pack("<Q", 2 ** 40)
    rejects(bytes(blob), "huge dim")
    # a quantised tensor whose row is not whole blocks
    w = W.GGUFWriter()
    w.add_tensor_raw("q", R.T_Q8_0, [32], bytes(34))
    blob = bytearray(w.to_bytes())
    blob[ti + 4:ti + 12] = struct.pack("<Q", 16)
    rejects(bytes(blob), "dim not a multiple of the block")

    # Real vocabulary files (0 tensors, not padded) parse, with consistent arrays.
    vdir = os.path.join(shared_dir(), "vocab")
    files = sorted(f for f in os.listdir(vdir) if f.endswith(".gguf")) if os.path.isdir(vdir) else []
    check(len(files) > 0, "no vocabulary GGUFs found in %s" % vdir)
    for f in files:
        try:
            g = R.GGUFFile(os.path.join(vdir, f))
            et, toks = g.get("tokenizer.ggml.tokens")
            ok = et == R.VT_STRING and len(toks) > 100 and len(g.tensors) == 0
            st = g.get("tokenizer.ggml.token_type")
            if st is not None:
                ok = ok and len(st[1]) == len(toks)
            check(ok, "vocab %s: tokens/token_type inconsistent" % f)
        except R.GGUFError as e:
            check(False, "vocab %s: %s" % (f, e))


# ---------------------------------------------------------------------------
# Forward pass: naive second implementation
# ---------------------------------------------------------------------------


def naive_forward(cfg, Wt, tokens):
    """Loop-based forward over the whole sequence, no cache, float64, from
    the equations: RMSNorm, Q/K/V (+bias), per-head q/k RMSNorm (qwen3),
    RoPE (NORM: pairs (2i, 2i+1); NEOX: pairs (i, i + n_rot/2)), causal
    softmax attention with GQA (query head h uses kv head h // (n_head /
    n_head_kv)), output projection, SwiGLU FFN, final norm, output (or tied
    token_embd). gpt-oss: YaRN angles and scale, sinks in the denominator, a
    window on layers l % period < period - 1, biases, top-k-then-softmax
    routing with a router bias, the clamped SwiGLU with expert biases."""
    eps = cfg.rms_eps
    hd, nh, nkv, nrot = cfg.head_dim, cfg.n_head, cfg.n_head_kv, cfg.n_rot

    def get(name):
        return None if name not in Wt else np.asarray(Wt[name], dtype=np.float64)

    def rms(v, w):
        return v / math.sqrt(float(v @ v) / len(v) + eps) * w

    rope_ff = get("rope_freqs.weight")

    oss = cfg.arch == "gpt-oss"
    y = getattr(cfg, "yarn", None)

    def rope(vec, pos):
        out = vec.copy()
        for i in range(nrot // 2):
            freq = cfg.rope_base ** (-2.0 * i / nrot)
            if rope_ff is not None:
                freq /= rope_ff[i]
            msc = 1.0
            if y is not None:
                # YaRN from its definition: dims whose wavelength 2 pi / freq
                # fits at most beta_slow times in the original context are
                # interpolated, at least beta_fast times kept, linear between
                def dim_of(beta):
                    return nrot * math.log(y["orig"] / (beta * 2 * math.pi)) / (2 * math.log(cfg.rope_base))
                lo, hi = dim_of(y["beta_fast"]), dim_of(y["beta_slow"])
                if y["truncate"]:
                    lo, hi = math.floor(lo), math.ceil(hi)
                lo, hi = max(lo, 0), min(hi, nrot - 1)
                ramp = min(1.0, max(0.0, (i - lo) / max(hi - lo, 0.001)))
                freq = freq * ((1 - ramp) + ramp / y["factor"])
                msc = y["attn_factor"] * (1 + 0.1 * math.log(y["factor"]))
            ang = (pos / cfg.rope_scale) * freq
            c, s = math.cos(ang) * msc, math.sin(ang) * msc
            a, b = (i, i + nrot // 2) if cfg.rope_neox else (2 * i, 2 * i + 1)
            out[a] = vec[a] * c - vec[b] * s
            out[b] = vec[a] * s + vec[b] * c
        return out

    T = len(tokens)
    x = [get("token_embd.weight")[t].copy() for t in tokens]
    for layer in range(cfg.n_layer):
        p = "blk.%d." % layer
        wq, wk, wv, wo = (get(p + n) for n in ("attn_q.weight", "attn_k.weight",
                                               "attn_v.weight", "attn_output.weight"))
        bq, bk, bv = get(p + "attn_q.bias"), get(p + "attn_k.bias"), get(p + "attn_v.bias")
        qn, kn = get(p + "attn_q_norm.weight"), get(p + "attn_k_norm.weight")
        Q, K, V = [], [], []
        for t in range(T):
            h = rms(x[t], get(p + "attn_norm.weight"))
            q, k, v = wq @ h, wk @ h, wv @ h
            if bq is not None:
                q, k, v = q + bq, k + bk, v + bv
            qs = [q[j * hd:(j + 1) * hd] for j in range(nh)]
            ks = [k[j * hd:(j + 1) * hd] for j in range(nkv)]
            if qn is not None:
                qs = [rms(e, qn) for e in qs]
                ks = [rms(e, kn) for e in ks]
            Q.append([rope(e, t) for e in qs])
            K.append([rope(e, t) for e in ks])
            V.append([v[j * hd:(j + 1) * hd] for j in range(nkv)])
        sinks = get(p + "attn_sinks.weight")
        win = cfg.n_swa if oss and layer % cfg.swa_period < cfg.swa_period - 1 else 0
        newx = []
        for t in range(T):
            o = np.zeros(nh * hd)
            first = max(0, t - win + 1) if win else 0
            for hh in range(nh):
                kvh = hh // (nh // nkv)
                sc = [float(Q[t][hh] @ K[s][kvh]) / math.sqrt(hd) for s in range(first, t + 1)]
                mx = max(sc + ([float(sinks[hh])] if sinks is not None else []))
                ex = [math.exp(e - mx) for e in sc]
                tot = sum(ex) + (math.exp(float(sinks[hh]) - mx) if sinks is not None else 0.0)
                for j, s in enumerate(range(first, t + 1)):
                    o[hh * hd:(hh + 1) * hd] += ex[j] / tot * V[s][kvh]
            xt = x[t] + wo @ o
            if get(p + "attn_output.bias") is not None:
                xt = xt + get(p + "attn_output.bias")
            h = rms(xt, get(p + ("post_attention_norm.weight" if oss else "ffn_norm.weight")))
            router = get(p + "ffn_gate_inp.weight")
            if router is not None and oss:
                # gpt-oss: the k largest biased logits, softmax over them;
                # experts with biases and the clamped SwiGLU
                lg = [float(r @ h) + float(b) for r, b in zip(router, get(p + "ffn_gate_inp.bias"))]
                order = sorted(range(len(lg)), key=lambda e: (-lg[e], e))[:cfg.n_expert_used]
                mx = max(lg[e] for e in order)
                z = sum(math.exp(lg[e] - mx) for e in order)
                acc = np.zeros_like(xt)
                for e in order:
                    g = get(p + "ffn_gate_exps.weight")[e] @ h + get(p + "ffn_gate_exps.bias")[e]
                    u = get(p + "ffn_up_exps.weight")[e] @ h + get(p + "ffn_up_exps.bias")[e]
                    act = np.zeros_like(g)
                    for k in range(len(g)):
                        gk = min(float(g[k]), 7.0)
                        uk = min(max(float(u[k]), -7.0), 7.0)
                        act[k] = gk / (1.0 + math.exp(-1.702 * gk)) * (uk + 1.0)
                    yv = get(p + "ffn_down_exps.weight")[e] @ act + get(p + "ffn_down_exps.bias")[e]
                    acc += math.exp(lg[e] - mx) / z * yv
                newx.append(xt + acc)
                continue
            if router is not None:
                # MoE: softmax over all experts, the k most probable (lower
                # index first on a tie), weights renormalised, weighted sum
                lg = [float(r @ h) for r in router]
                mx = max(lg)
                pr = [math.exp(v - mx) for v in lg]
                z = sum(pr)
                pr = [v / z for v in pr]
                order = sorted(range(len(pr)), key=lambda e: (-pr[e], e))[:cfg.n_expert_used]
                tot = sum(pr[e] for e in order)
                acc = np.zeros_like(xt)
                for e in order:
                    g = get(p + "ffn_gate_exps.weight")[e] @ h
                    u = get(p + "ffn_up_exps.weight")[e] @ h
                    acc += pr[e] / tot * (get(p + "ffn_down_exps.weight")[e] @ (g / (1.0 + np.exp(-g)) * u))
                newx.append(xt + acc)
                continue
            g = get(p + "ffn_gate.weight") @ h
            u = get(p + "ffn_up.weight") @ h
            act = g * (1.0 / (1.0 + np.exp(-g))) * u
            newx.append(xt + get(p + "ffn_down.weight") @ act)
        x = newx
    out_w = get("output.weight")
    if out_w is None:
        out_w = get("token_embd.weight")
    return np.stack([out_w @ rms(e, get("output_norm.weight")) for e in x])


def _load(writer):
    return R.Model(R.GGUFFile.from_bytes(writer.to_bytes()))


MODEL_VARIANTS = [
    # (label, arch, kwargs)
    ("llama", "llama", {}),
    ("llama3", "llama", {"rope_freqs": True}),
    ("llama-linear", "llama", {"rope_scale": 4.0, "tied": True}),
    ("llama-partial-rot", "llama", {"n_rot": 8}),
    ("qwen2", "qwen2", {"tied": True}),
    ("qwen3", "qwen3", {"head_dim": "n_embd/2"}),   # key_length != n_embd / n_head
    ("qwen3moe", "qwen3moe", {"n_expert": 6, "n_expert_used": 2, "n_ff_exp": "n_ff"}),
    ("gpt-oss", "gpt-oss", {"n_expert": 6, "n_expert_used": 2, "n_ff_exp": "n_ff"}),
]
ALL_TYPES = [R.T_F32, R.T_F16, R.T_BF16, R.T_Q8_0, R.T_Q4_0, R.T_Q4_K, R.T_Q5_K, R.T_Q6_K]


def test_models(quick):
    toks = [1, 7, 3, 42, 9, 0, 13]
    for vi, (label, arch, kw) in enumerate(MODEL_VARIANTS):
        types = ALL_TYPES if not quick else [R.T_F32, R.T_Q4_K]
        for t in types:
            tname = R.GGML_TYPES[t][0]
            n_embd = 256 if t in (R.T_Q4_K, R.T_Q5_K, R.T_Q6_K) else 64
            n_ff = 256 if n_embd == 256 else 96
            kwt = dict(kw)
            if kwt.get("head_dim") == "n_embd/2":
                kwt["head_dim"] = n_embd // 2
            if kwt.get("n_ff_exp") == "n_ff":
                kwt["n_ff_exp"] = n_ff
            w, Wt = W.random_model(arch, t, seed=100 + vi, n_embd=n_embd, n_ff=n_ff,
                                   n_head=4, n_head_kv=2, n_vocab=50, **kwt)
            m = _load(w)
            tag = "%s %s" % (label, tname)
            check(m.tied == bool(kw.get("tied")), tag + ": tied detection")
            if t == R.T_F32:
                # F32: the reference must reproduce the float32 weights exactly
                # and agree with the naive forward built from those weights.
                check_close(m.layers[0]["wq"], Wt["blk.0.attn_q.weight"], 0, tag + ": wq")
                ref_w = Wt
            else:
                # Quantised: the naive forward uses the dequantised weights.
                ref_w = {n: m.g.tensor(n) for n in m.g.tensor_names}
                up = "blk.1.ffn_up_exps.weight" if arch in ("qwen3moe", "gpt-oss") else "blk.1.ffn_up.weight"
                err = float(np.max(np.abs(ref_w[up] - Wt[up])))
                check(err < 0.2, tag + ": dequantised weights far from originals (%.3g)" % err)
            logits = m.forward(toks)
            naive = naive_forward(m.cfg, ref_w, toks)
            check_close(logits, naive, 1e-9 * max(1.0, float(np.abs(naive).max())),
                        tag + ": forward vs naive")
            # Incremental decoding with the KV cache gives the same logits.
            cache = m.new_cache()
            inc = np.concatenate([m.forward(toks[:3], cache)] +
                                 [m.forward([tk], cache) for tk in toks[3:]])
            check_close(inc, logits, 1e-10 * max(1.0, float(np.abs(logits).max())),
                        tag + ": cached vs full")
            check(np.all(np.isfinite(logits)) and float(np.std(logits)) > 1e-3,
                  tag + ": logits finite and non-trivial")
            if t == R.T_F32:
                # kv_f16 (an f16 KV cache): the cache holds half values, full
                # and cached runs agree, and the rounding moves the logits by
                # about half-precision error, not more.
                mh = R.Model(m.g, kv_f16=True)
                ch = mh.new_cache()
                inc = np.concatenate([mh.forward(toks[:3], ch)] +
                                     [mh.forward([tk], ch) for tk in toks[3:]])
                full = mh.forward(toks)
                check_close(inc, full, 1e-10 * max(1.0, float(np.abs(full).max())),
                            tag + ": kv_f16 cached vs full")
                kk = np.concatenate([ch["k"][0].ravel(), ch["v"][-1].ravel()])
                check(np.array_equal(kk, kk.astype(np.float16).astype(np.float64)),
                      tag + ": kv_f16 cache holds half values")
                d = float(np.abs(full - logits).max()) / float(np.abs(logits).max())
                check(0 < d < 1e-2, tag + ": kv_f16 changes logits by %.3g relative" % d)


def test_rope_equivalence():
    """GGUF llama Q/K rows are permuted at conversion so that NORM rope
    (adjacent pairs) on the permuted weights equals NEOX rope (halves) on the
    original ones. A llama model with permuted wq/wk must therefore give the
    same logits as a NEOX (qwen2, zero biases) model with the originals."""
    n_embd, nh, nkv, hd = 64, 4, 2, 16
    for rf in (False, True):
        wq, Wq = W.random_model("qwen2", R.T_F32, seed=7, n_embd=n_embd, n_head=nh,
                                n_head_kv=nkv, rope_freqs=rf,
                                weights={"blk.%d.attn_%s.bias" % (i, x): np.zeros(
                                    (nh if x == "q" else nkv) * hd, np.float32)
                                    for i in range(2) for x in "qkv"})

        def permute(w, n_heads):
            return w.reshape(n_heads, 2, hd // 2, -1).swapaxes(1, 2).reshape(w.shape)

        lw = dict(Wq)
        for i in range(2):
            lw["blk.%d.attn_q.weight" % i] = permute(Wq["blk.%d.attn_q.weight" % i], nh)
            lw["blk.%d.attn_k.weight" % i] = permute(Wq["blk.%d.attn_k.weight" % i], nkv)
        wl, _ = W.random_model("llama", R.T_F32, seed=8, n_embd=n_embd, n_head=nh,
                               n_head_kv=nkv, rope_freqs=rf, weights=lw)
        # same eps and rope base for both
        for w in (wl, wq):
            w.kv = [kv for kv in w.kv if not kv[0].endswith((".layer_norm_rms_epsilon",
                                                              ".rope.freq_base"))]
            arch = w.kv[0][2]
            w.add_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5)
            w.add_f32(arch + ".rope.freq_base", 10000.0)
        toks = [3, 1, 4, 1, 5, 9, 2, 6]
        a = _load(wl).forward(toks)
        b = _load(wq).forward(toks)
        check_close(a, b, 1e-10 * float(np.abs(a).max()),
                    "NORM(permuted) == NEOX(original)%s" % (" with rope_freqs" if rf else ""))
        check(float(np.abs(a[1:] - a[0]).max()) > 1e-3, "rope equivalence: positions differ")


def test_rope_scaling():
    """Linear scaling: rotation at position p with factor s equals the
    unscaled rotation at p / s."""
    w, _ = W.random_model("llama", R.T_F32, seed=3, rope_scale=4.0)
    w0, _ = W.random_model("llama", R.T_F32, seed=3)
    m, m0 = _load(w), _load(w0)
    check(m.cfg.rope_scale == 4.0 and m0.cfg.rope_scale == 1.0, "rope scale parsed")
    x = np.random.default_rng(0).standard_normal((5, 4, 16))
    pos = np.arange(5) * 4
    check_close(m.rope(x, pos), m0.rope(x, pos / 4.0), 1e-12, "linear rope scaling")
    check_close(m0.rope(x, np.zeros(5)), x, 0, "rope at position 0 is identity")


# ---------------------------------------------------------------------------
# stories260K against expected_greedy.json
# ---------------------------------------------------------------------------


def test_stories():
    sd = shared_dir()
    mp = os.path.join(sd, "models", "stories260K.gguf")
    ep = os.path.join(sd, "models", "expected_greedy.json")
    if not check(os.path.exists(mp) and os.path.exists(ep), "missing %s or %s" % (mp, ep)):
        return
    m = R.Model(mp)
    check(m.cfg.arch == "llama" and m.cfg.n_vocab == 512 and not m.cfg.rope_neox,
          "stories260K config: %s" % m.cfg.describe())
    exp = json.load(open(ep))
    bos = m.cfg.bos_id if m.cfg.bos_id is not None else 1
    eos = m.cfg.eos_id if m.cfg.eos_id is not None else 2
    # The float64 path, and the same with an f16 KV cache (kvloom's): the
    # rounding of K and V must not change any greedy token.
    mh = R.Model(m.g, kv_f16=True)
    for mm, label in ((m, ""), (mh, " (kv_f16)")):
        for case in exp["cases"]:
            prompt = case["prompt_ids"]
            # output_ids = every token fed after BOS (prompt tokens after BOS, then
            # greedy tokens); steps counts positions including BOS, so at most
            # steps - len(prompt) + 1 tokens are generated; BOS/EOS stops it.
            n_new = case["steps"] - len(prompt) + 1
            gen = mm.greedy(prompt, n_new, stop_ids=(bos, eos))
            got = prompt[1:] + gen
            ok = got == case["output_ids"]
            if not ok:
                k = next((i for i, (a, b) in enumerate(zip(got, case["output_ids"])) if a != b),
                         min(len(got), len(case["output_ids"])))
                print("  prompt %r%s: first difference at output %d" % (case["prompt"], label, k))
            check(ok, "stories260K greedy%s, prompt %r" % (label, case["prompt"]))
    # The logits fixture format round-trips.
    toks = [1, 403, 407, 261]
    lg = m.forward(toks)
    with tempfile.TemporaryDirectory() as td:
        p = os.path.join(td, "x.logits")
        R.write_logits(p, toks, lg)
        t2, l2 = R.read_logits(p)
        check(t2 == toks and l2.shape == lg.shape, "logits fixture shape")
        check_close(l2, lg, 1e-7 * float(np.abs(lg).max()), "logits fixture values")


def test_stories_bin():
    """The same model in llama2.c's checkpoint format (a header of 7 int32:
    dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative:
    separate classifier), seq_len; then float32 arrays token_embedding,
    rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, ...) must hold
    exactly the tensors the GGUF parser returns (llama2.c's adjacent-pair
    rope needs no Q/K permutation)."""
    sd = shared_dir()
    bp = os.path.join(sd, "models", "stories260K.bin")
    gp = os.path.join(sd, "models", "stories260K.gguf")
    if not check(os.path.exists(bp) and os.path.exists(gp), "missing %s or %s" % (bp, gp)):
        return
    raw = open(bp, "rb").read()
    dim, hid, L, nh, nkv, V, seq = struct.unpack("<7i", raw[:28])
    shared_cls = V > 0
    V = abs(V)
    f = np.frombuffer(raw, dtype="<f4", offset=28)
    kvd = dim * nkv // nh
    pos = [0]

    def take(*shape):
        n = int(np.prod(shape))
        a = f[pos[0]:pos[0] + n].reshape(shape)
        pos[0] += n
        return a

    ck = {"token_embd.weight": take(V, dim)}
    per_layer = [("attn_norm.weight", (dim,)), ("attn_q.weight", (dim, dim)),
                 ("attn_k.weight", (kvd, dim)), ("attn_v.weight", (kvd, dim)),
                 ("attn_output.weight", (dim, dim)), ("ffn_norm.weight", (dim,)),
                 ("ffn_gate.weight", (hid, dim)), ("ffn_down.weight", (dim, hid)),
                 ("ffn_up.weight", (hid, dim))]
    for name, shape in per_layer:
        a = take(L, *shape)
        for i in range(L):
            ck["blk.%d.%s" % (i, name)] = a[i]
    ck["output_norm.weight"] = take(dim)
    take(seq * (dim // nh) // 2)
    take(seq * (dim // nh) // 2)
    ck["output.weight"] = ck["token_embd.weight"] if shared_cls else take(V, dim)
    check(pos[0] == f.size, "stories260K.bin: %d floats left over" % (f.size - pos[0]))
    g = R.GGUFFile(gp)
    bad = [n for n, a in ck.items() if n not in g.tensors or not np.array_equal(g.tensor(n), a)]
    check(not bad, "stories260K gguf vs bin tensors differ: %s" % bad[:5])
    check(len(g.tensors) == len(ck), "stories260K: %d tensors vs %d" % (len(g.tensors), len(ck)))


def test_cli():
    """The three commands, through main(), on a temporary model file."""
    import contextlib
    import io
    w, _ = W.random_model("qwen3", R.T_Q8_0, seed=21, n_vocab=40)
    with tempfile.TemporaryDirectory() as td:
        mp = os.path.join(td, "m.gguf")
        w.write(mp)
        lp = os.path.join(td, "m.logits")
        check(R.main(["logits", mp, "--tokens", "1 5 9 39", "--out", lp]) == 0, "cli logits rc")
        toks, lg = R.read_logits(lp)
        m = R.Model(mp)
        exp = m.forward([1, 5, 9, 39])
        check(toks == [1, 5, 9, 39] and lg.shape == (4, 40), "cli logits header")
        check_close(lg, exp, 1e-7 * float(np.abs(exp).max()), "cli logits values")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = R.main(["greedy", mp, "--tokens", "1 5", "-n", "6"])
        out = [int(x) for x in buf.getvalue().split()]
        gen = m.greedy([1, 5], 6, stop_ids=(2,))
        check(rc == 0 and out == [1, 5] + gen, "cli greedy: %r vs %r" % (out, [1, 5] + gen))
        # greedy agrees with argmax of the full-sequence logits
        if len(gen) >= 2:
            full = m.forward([1, 5] + gen[:-1])
            check([int(np.argmax(r)) for r in full[1:]] == gen, "greedy == argmax of prefill")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = R.main(["info", mp])
        check(rc == 0 and "qwen3.attention.head_count" in buf.getvalue() and
              "blk.1.attn_k_norm.weight" in buf.getvalue(), "cli info")
        bad = os.path.join(td, "bad.gguf")
        open(bad, "wb").write(b"GGUF" + struct.pack("<IQQ", 3, 1, 0))
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = R.main(["logits", bad, "--tokens", "1", "--out", lp])
        check(rc == 1 and "offset" in err.getvalue(), "cli error on a truncated file: %r"
              % err.getvalue())
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = R.main(["logits", mp, "--tokens", "1 40", "--out", lp])
        check(rc == 1 and "out of range" in err.getvalue(), "cli error on a bad token id")


def test_f16_rounding():
    """--kv-f16 relies on numpy's float64 -> float16 cast rounding to nearest,
    ties to even (as kvloom's f32_to_fp16)."""
    x = np.array([1 + 1 / 2048, 1 + 3 / 2048, -(1 + 1 / 2048), 65519.0, 65520.0,
                  2.0 ** -25, 3 * 2.0 ** -25, 2.0 ** -14 * (1 + 1 / 2048)])
    want = np.array([1.0, 1 + 2 / 1024, -1.0, 65504.0, np.inf,
                     0.0, 2 * 2.0 ** -24, 2.0 ** -14])
    with np.errstate(over="ignore"):  # 65520 -> inf is the point
        got = x.astype(np.float16).astype(np.float64)
    check(np.array_equal(got, want), "float16 cast rounds to nearest even: %r" % (got,))


def test_fixtures(model_dir):
    """The committed tests/fixtures/ref/*.logits are what this reference
    computes for the regenerated fixture models (whose bytes the caller has
    checked against tests/fixtures/models.sha256)."""
    ref_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                           "tests", "fixtures", "ref")
    names = sorted(f[:-len(".logits")] for f in os.listdir(ref_dir) if f.endswith(".logits")) \
        if os.path.isdir(ref_dir) else []
    check(len(names) > 0, "no fixtures in %s" % ref_dir)
    for n in names:
        mp = os.path.join(model_dir, n + ".gguf")
        if not check(os.path.exists(mp), "fixture model %s missing" % mp):
            continue
        toks, want = R.read_logits(os.path.join(ref_dir, n + ".logits"))
        got = R.Model(mp, kv_f16=True).forward(toks)  # as tools/gen_fixtures.sh
        check_close(got, want, 1e-7 * float(np.abs(want).max()), "fixture %s" % n)


def main():
    quick = "--quick" in sys.argv
    fixtures = None
    if "--fixtures" in sys.argv:
        fixtures = sys.argv[sys.argv.index("--fixtures") + 1]
    if "--fail" in sys.argv:
        check(False, sys.argv[sys.argv.index("--fail") + 1])
    t0 = time.time()
    rng = np.random.default_rng(12345)
    for fn in (test_deq_literal, lambda: test_deq_packed(rng), test_parser,
               lambda: test_models(quick), test_rope_equivalence, test_rope_scaling,
               test_f16_rounding, test_stories, test_stories_bin, test_cli):
        try:
            fn()
        except Exception as e:  # a crash in one group is a failure, not an abort
            import traceback
            traceback.print_exc()
            check(False, "exception: %r" % e)
    if fixtures:
        try:
            test_fixtures(fixtures)
        except Exception as e:
            import traceback
            traceback.print_exc()
            check(False, "exception: %r" % e)
    print("selftest time %.1f s" % (time.time() - t0))
    print("%d passed, %d failed" % (N_PASS, N_FAIL))
    return 1 if N_FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
