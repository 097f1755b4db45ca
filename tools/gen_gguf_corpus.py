#!/usr/bin/python3
"""gen_gguf_corpus.py — writes the seed corpus of fuzz/fuzz_gguf.c.

Usage: /usr/bin/python3 tools/gen_gguf_corpus.py [OUT_DIR] [SHARED_DIR]
(defaults fuzz/corpus/fuzz_gguf and ../shared). Seeds are small GGUF files
assembled here byte by byte, independently of the C writer: valid files of
each kind (every value type, string arrays, tensors of several dtypes,
alignment 64, v2, vocabulary-only) and malformed ones (one field broken),
plus short prefixes of real files from SHARED_DIR. Deterministic output.
"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
              F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
# dtype: (block elements, bytes per block)
DT = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144),
      13: (256, 176), 14: (256, 210), 30: (1, 2)}


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        for it in items:
            out += value(et, it)
        return out
    return struct.pack(SCALAR_FMT[t], v)


def gguf(kvs, tensors=(), version=3, align=32, data=None, magic=b"GGUF",
         n_tensors=None, n_kv=None, pad=True):
    """kvs: [(key, type, value)]; tensors: [(name, dims, dtype, offset, nbytes)]."""
    out = magic + struct.pack("<I", version)
    out += struct.pack("<QQ", len(tensors) if n_tensors is None else n_tensors,
                       len(kvs) if n_kv is None else n_kv)
    for k, t, v in kvs:
        out += s(k) + struct.pack("<I", t) + value(t, v)
    for name, dims, dt, off, _ in tensors:
        out += s(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", dt, off)
    if tensors and pad:
        out += b"\0" * ((-len(out)) % align)
    if data is not None:
        out += data
    return out


def nbytes(dims, dt):
    blck, size = DT[dt]
    n = 1
    for d in dims:
        n *= d
    return n // blck * size


def layout(specs, align=32):
    """specs: [(name, dims, dtype)] -> tensors with aligned offsets, data."""
    tensors, off, data = [], 0, b""
    for i, (name, dims, dt) in enumerate(specs):
        nb = nbytes(dims, dt)
        tensors.append((name, dims, dt, off, nb))
        data += bytes((i * 37 + j * 11) & 0xFF for j in range(nb))
        pad = (-nb) % align
        data += b"\0" * pad
        off += nb + pad
    return tensors, data


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "fuzz/corpus/fuzz_gguf"
    shared = sys.argv[2] if len(sys.argv) > 2 else "../shared"
    os.makedirs(out_dir, exist_ok=True)
    seeds = {}

    all_scalars = [("t.u8", U8, 200), ("t.i8", I8, -5), ("t.u16", U16, 60000),
                   ("t.i16", I16, -300), ("t.u32", U32, 4000000000), ("t.i32", I32, -7),
                   ("t.f32", F32, 0.5), ("t.bool", BOOL, 1), ("t.str", STR, "hello"),
                   ("t.u64", U64, 2**63 + 5), ("t.i64", I64, -2**40), ("t.f64", F64, 1e-300)]
    arrays = [("a.u8", ARR, (U8, [1, 2, 3])), ("a.i32", ARR, (I32, [-1, 0, 1])),
              ("a.f32", ARR, (F32, [0.0, -1.5])), ("a.bool", ARR, (BOOL, [0, 1, 1])),
              ("a.f64", ARR, (F64, [2.5])), ("a.u64", ARR, (U64, [])),
              ("a.str", ARR, (STR, ["<unk>", "", "a b", "\u0120the"]))]
    vocab = [("general.architecture", STR, "llama"), ("tokenizer.ggml.model", STR, "llama"),
             ("tokenizer.ggml.tokens", ARR, (STR, ["<unk>", "<s>", "</s>", "a", "b", "ab"])),
             ("tokenizer.ggml.scores", ARR, (F32, [0.0, 0.0, 0.0, -1.0, -2.0, -0.5])),
             ("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3, 1, 1, 1])),
             ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.add_bos_token", BOOL, 1)]

    seeds["valid_empty"] = gguf([])
    seeds["valid_scalars"] = gguf(all_scalars)
    seeds["valid_arrays"] = gguf(arrays)
    seeds["valid_vocab"] = gguf(vocab)
    seeds["valid_v2"] = gguf(all_scalars[:4], version=2)
    model = [("token_embd.weight", [8, 6], 0), ("output_norm.weight", [8], 0),
             ("blk.0.attn_q.weight", [8, 8], 1), ("blk.0.ffn_up.weight", [32, 2], 8),
             ("blk.0.ffn_down.weight", [32, 1], 2), ("blk.0.attn_k.weight", [4, 2], 30)]
    t, d = layout(model)
    seeds["valid_model"] = gguf(vocab + [("llama.embedding_length", U32, 8)], t, data=d)
    seeds["valid_model_v2"] = gguf(vocab[:1], t, version=2, data=d)
    t, d = layout([("k4", [256, 1], 12), ("k5", [256], 13), ("k6", [256, 1, 1], 14)])
    seeds["valid_kquants"] = gguf([("general.architecture", STR, "llama")], t, data=d)
    t, d = layout([("a", [3], 0), ("b", [5, 1, 1, 2], 0)], align=64)
    seeds["valid_align64"] = gguf([("general.alignment", U32, 64)], t, align=64, data=d)
    t, d = layout([("a", [3], 0), ("b", [2], 0)], align=1)
    seeds["valid_align1"] = gguf([("general.alignment", U32, 1)], t, align=1, data=d)

    # qwen3moe: expert metadata, a router and 3-D expert tensors (dims
    # {n_in, n_out, n_expert}), as the GGUF converter writes them
    moe_kv = [("general.architecture", STR, "qwen3moe"), ("qwen3moe.embedding_length", U32, 32),
              ("qwen3moe.block_count", U32, 1), ("qwen3moe.attention.head_count", U32, 2),
              ("qwen3moe.expert_count", U32, 4), ("qwen3moe.expert_used_count", U32, 2),
              ("qwen3moe.expert_feed_forward_length", U32, 32)]
    moe_t = [("token_embd.weight", [32, 6], 8), ("blk.0.ffn_gate_inp.weight", [32, 4], 0),
             ("blk.0.ffn_gate_exps.weight", [32, 32, 4], 2), ("blk.0.ffn_up_exps.weight", [32, 32, 4], 2),
             ("blk.0.ffn_down_exps.weight", [32, 32, 4], 8)]
    t, d = layout(moe_t)
    seeds["valid_moe"] = gguf(moe_kv, t, data=d)
    seeds["bad_moe_zero_experts"] = gguf(moe_kv[:4] + [("qwen3moe.expert_count", U32, 0)] + moe_kv[5:], t, data=d)
    seeds["bad_moe_topk"] = gguf(moe_kv[:5] + [("qwen3moe.expert_used_count", U32, 9)] + moe_kv[6:], t, data=d)
    t2 = list(t)
    t2[4] = ("blk.0.ffn_down_exps.weight", [32, 32, 2**62], 8, t[4][3], t[4][4])
    seeds["bad_moe_expert_dims"] = gguf(moe_kv, t2, data=d)

    good_t, good_d = layout([("w", [8, 2], 0), ("q", [32], 8)])
    base_kv = [("general.architecture", STR, "llama"), ("x.flag", BOOL, 1)]
    seeds["bad_magic"] = gguf(base_kv, good_t, data=good_d, magic=b"GGUG")
    seeds["bad_version1"] = gguf(base_kv, version=1)
    seeds["bad_version4"] = gguf(base_kv, version=4)
    seeds["bad_huge_n_kv"] = gguf(base_kv, n_kv=2**60)
    seeds["bad_huge_n_tensors"] = gguf(base_kv, good_t, data=good_d, n_tensors=2**62)
    seeds["bad_extra_kv"] = gguf(base_kv, good_t, data=good_d, n_kv=3)
    seeds["bad_dup_key"] = gguf(base_kv + [("x.flag", U32, 1)])
    seeds["bad_bool"] = gguf([("x.flag", BOOL, 2)])
    seeds["bad_vtype"] = gguf(base_kv)[:-5] + struct.pack("<IB", 13, 1)
    seeds["bad_nested"] = gguf([("a", ARR, (ARR, []))])[:-8] + struct.pack("<Q", 1) + value(ARR, (U8, [1]))
    b = gguf([("k" * 20, U8, 1)])
    seeds["bad_key_len"] = b[:24] + struct.pack("<Q", 2**64 - 1) + b[32:]
    seeds["bad_str_arr_count"] = gguf([("a", ARR, (STR, ["x"]))])[:-17] + struct.pack("<Q", 2**61) + s("x")
    seeds["bad_alignment"] = gguf([("general.alignment", U32, 48)], good_t, data=good_d)
    seeds["bad_alignment_type"] = gguf([("general.alignment", U64, 32)], good_t, data=good_d)
    t = [("w", [8, 2], 0, 0, 64), ("q", [32], 8, 32, 34)]
    seeds["bad_overlap"] = gguf(base_kv, t, data=good_d)
    t = [("w", [8, 2], 0, 0, 64), ("w", [32], 8, 64, 34)]
    seeds["bad_dup_tensor"] = gguf(base_kv, t, data=good_d)
    t = [("w", [8, 0], 0, 0, 0)]
    seeds["bad_dim0"] = gguf(base_kv, t, data=good_d)
    t = [("w", [2**32, 2**32], 0, 0, 0)]
    seeds["bad_dims_overflow"] = gguf(base_kv, t, data=good_d)
    t = [("w", [8, 2], 99, 0, 0)]
    seeds["bad_type"] = gguf(base_kv, t, data=good_d)
    t = [("q", [48], 8, 0, 0)]
    seeds["bad_block"] = gguf(base_kv, t, data=good_d)
    t = [("w", [8, 2], 0, 2**64 - 32, 64)]
    seeds["bad_offset_overflow"] = gguf(base_kv, t, data=good_d)
    t = [("w", [8, 2], 0, 8, 64)]
    seeds["bad_offset_unaligned"] = gguf(base_kv, t, data=good_d)
    t = [("w", [8, 2, 1, 1, 1], 0, 0, 64)]
    seeds["bad_ndims5"] = gguf(base_kv, t, data=good_d)
    seeds["bad_truncated_data"] = gguf(base_kv, good_t, data=good_d[:40])
    full = gguf(vocab, good_t, data=good_d)
    seeds["bad_truncated_meta"] = full[:len(full) // 2]

    for name, path, n in [("real_stories260K_head", "models/stories260K.gguf", 3000),
                          ("real_llama_spm_head", "vocab/ggml-vocab-llama-spm.gguf", 2500),
                          ("real_gpt2_head", "vocab/ggml-vocab-gpt-2.gguf", 1500)]:
        try:
            with open(os.path.join(shared, path), "rb") as f:
                seeds[name] = f.read(n)
        except OSError:
            pass

    for name, b in sorted(seeds.items()):
        with open(os.path.join(out_dir, name + ".gguf"), "wb") as f:
            f.write(b)
    print(f"{len(seeds)} seeds in {out_dir}")


if __name__ == "__main__":
    main()
