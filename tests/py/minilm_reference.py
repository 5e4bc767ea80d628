"""An independent all-MiniLM-L6-v2 for crates/decide/tests/embed.rs: the sentence-transformers
embedding (BERT, mean pooling over the attention mask, L2 normalisation) written out in numpy
from model.safetensors (its header and raw little-endian f32 buffers read here), in float64,
one sentence at a time (no padding), with the `tokenizers` package for word pieces (cut at
256, as sentence-transformers' max_seq_length for this model).

usage: minilm_reference.py MODEL_DIR < sentences.json > vectors.json
"""

import json
import math
import struct
import sys

import numpy as np
from tokenizers import Tokenizer

MAX_TOKENS = 256
HEADS = 12
EPS = 1e-12


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        start, end = info["data_offsets"]
        buf = np.frombuffer(data[start:end], dtype="<f4")
        tensors[name] = buf.reshape(info["shape"]).astype(np.float64)
    return tensors


def layer_norm(x, w, b):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * w + b


erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def linear(t, prefix, x):
    return x @ t[prefix + ".weight"].T + t[prefix + ".bias"]


def embed(t, layers, ids):
    n = len(ids)
    x = (
        t["embeddings.word_embeddings.weight"][ids]
        + t["embeddings.position_embeddings.weight"][:n]
        + t["embeddings.token_type_embeddings.weight"][0]
    )
    x = layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"])
    hidden = x.shape[1]
    d = hidden // HEADS
    for i in range(layers):
        p = f"encoder.layer.{i}."
        q = linear(t, p + "attention.self.query", x).reshape(n, HEADS, d).transpose(1, 0, 2)
        k = linear(t, p + "attention.self.key", x).reshape(n, HEADS, d).transpose(1, 0, 2)
        v = linear(t, p + "attention.self.value", x).reshape(n, HEADS, d).transpose(1, 0, 2)
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        ctx = (probs @ v).transpose(1, 0, 2).reshape(n, hidden)
        a = linear(t, p + "attention.output.dense", ctx)
        x = layer_norm(
            a + x,
            t[p + "attention.output.LayerNorm.weight"],
            t[p + "attention.output.LayerNorm.bias"],
        )
        h = gelu(linear(t, p + "intermediate.dense", x))
        o = linear(t, p + "output.dense", h)
        x = layer_norm(o + x, t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"])
    # Every position is a real word piece (no padding), so the mean over the mask is the mean.
    pooled = x.mean(axis=0)
    return pooled / max(np.linalg.norm(pooled), EPS)


def main(model_dir):
    with open(f"{model_dir}/config.json") as f:
        config = json.load(f)
    t = read_safetensors(f"{model_dir}/model.safetensors")
    tokenizer = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    sentences = json.load(sys.stdin)
    out = []
    for s in sentences:
        ids = tokenizer.encode(s).ids
        out.append(embed(t, config["num_hidden_layers"], np.array(ids)).tolist())
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
