#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/): a few small inputs each
target reads as valid, so that the short runs in ctest start from inputs that reach past the first
checks. Run from anywhere; it rewrites the seeds it makes."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def seed(target, name, data):
    os.makedirs(os.path.join(HERE, target), exist_ok=True)
    with open(os.path.join(HERE, target, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def gguf_string(s):
    return struct.pack("<Q", len(s)) + s.encode()


def gguf(kvs):
    """A GGUF v3 file without tensors: (key, type, packed value) pairs."""
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
    for key, kind, value in kvs:
        out += gguf_string(key) + struct.pack("<I", kind) + value
    return out


def frame(op, tag, sequence, payload, pad):
    """comm/frame.h's header (magic "ORCF", op, 3 reserved, tag, sequence, length) and payload;
    the shm rings pad each frame to 8 bytes."""
    out = struct.pack("<IB3xIIQ", 0x4F524346, op, tag, sequence, len(payload)) + payload
    return out + b"\0" * ((-len(out)) % 8 if pad else 0)


SEND, ALL_REDUCE = 5, 1

seed("fuzz_gguf", "arch_only", gguf([("general.architecture", 8, gguf_string("llama"))]))
seed("fuzz_gguf", "arch_and_context",
     gguf([("general.architecture", 8, gguf_string("qwen2")), ("qwen2.context_length", 4, struct.pack("<I", 4096))]))

seed("fuzz_openai_request", "chat", '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}')
seed("fuzz_openai_request", "completion", '{"prompt":"hello","max_tokens":2,"temperature":0.5,"top_p":0.9,"stop":["\\n"]}')

# The first byte says which parts of the genuinely signed request the fields that follow replace.
seed("fuzz_signed_request", "genuine", b"\x00")
seed("fuzz_signed_request", "other_node", b"\x01\x08ABCDEF01")
seed("fuzz_signed_request", "later_clock", b"\x80\x01\x05")

seed("fuzz_job_request", "prompt", '{"prompt":"hello there","max_tokens":3,"seed":7}')
seed("fuzz_job_request", "chat", '{"messages":[{"role":"user","content":"hi"}],"temperature":0.7,"top_k":40}')
seed("fuzz_job_request", "submission", '{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":9}')

seed("fuzz_tokenizer", "ascii", "Hello, world! 123")
seed("fuzz_tokenizer", "utf8", "caf\u00e9 \u65e5\u672c <|im_start|>user\n")

# fuzz_comm_stream: 0x80 then the answer to rank 0's challenge; or the collective byte (4: a recv
# of f32 from rank 1, tag 7), the count byte (3: four elements), then rank 1's two frames.
seed("fuzz_comm_stream", "handshake", b"\x80" + bytes(range(48)))
seed("fuzz_comm_stream", "recv_f32",
     b"\x04\x03" + frame(SEND, 7, 0, struct.pack("<4f", 1, 2, 3, 4), False) +
     frame(SEND, 7, 1, struct.pack("<4f", 5, 6, 7, 8), False))

# fuzz_comm_shm: the choice byte (bits 0-1: plain or summed f32/f16/bf16; bits 2-4: the op), the
# size byte (payload bytes - 1), then what rank 1 writes into rank 0's ring: two padded frames.
seed("fuzz_comm_shm", "plain_all_reduce",
     b"\x00\x04" + frame(ALL_REDUCE, 0, 0, b"abcde", True) + frame(ALL_REDUCE, 0, 1, b"fghij", True))
seed("fuzz_comm_shm", "summed_f32",
     b"\x01\x0f" + frame(ALL_REDUCE, 0, 0, struct.pack("<4f", 1, 2, 3, 4), True) +
     frame(ALL_REDUCE, 0, 1, struct.pack("<4f", 5, 6, 7, 8), True))
seed("fuzz_comm_shm", "send_half_written", b"\x10\x07" + frame(SEND, 0, 0, b"12345678", True)[:20])
