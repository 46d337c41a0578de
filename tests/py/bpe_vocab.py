"""The Python side of tests/tokenizer.rs: a byte-level BPE vocabulary, and Hugging Face
`tokenizers`' ids for prompts on a GGUF that holds it.

usage:
  bpe_vocab.py train OUT_DIR      writes OUT_DIR/vocab.json: {"tokens": [...], "merges": [...],
                                  "token_type": [...]} (ids in order; control tokens first)
  bpe_vocab.py train-small OUT_DIR SIZE
                                  the same for a vocabulary of at most SIZE entries trained on a
                                  small lowercase corpus, its alphabet only the corpus's own bytes
                                  (so it fits a tiny model's embedding rows)
  bpe_vocab.py encode GGUF PROMPTS.json OUT.json
                                  reads the tokenizer.ggml.* keys of GGUF with gguf-py, builds a
                                  byte-level BPE with `tokenizers` from them and writes the ids
                                  of each prompt (BOS first when add_bos_token is true)
"""

import json
import os
import sys

SPECIALS = ["<|begin_of_sentence|>", "<|end_of_sentence|>", "<|pad|>"]

CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Kernel developers compare their GPU path with the reference, layer by layer.",
    "DeepSeek-V4.1-Flash has 40 layers, 384 experts and a 129280-token vocabulary.",
    "def forward(self, x):\n    return self.norm(x) + 1\n",
    "Les données sont arrondies en bf16. 数据以 bf16 舍入。 Ünïcödé ✓ 🙂",
    "numbers 0 1 2 3 42 1234567 3.14159 -7e-3, punctuation!? (yes) [no] {maybe}",
]

SMALL_CORPUS = [
    "the lens shows the kernel where the oracle leaves the reference",
    "a kernel developer reads the lens to see where the route flips",
    "the oracle and the kernel see the same tokens",
]


def train(out_dir: str, vocab_size: int = 600, corpus=None) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    # The full byte alphabet for the main vocabulary; the corpus's own bytes for a small one.
    alphabet = pre_tokenizers.ByteLevel.alphabet() if corpus is None else []
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=SPECIALS,
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS if corpus is None else corpus, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = model["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    types = [3 if t in SPECIALS else 1 for t in tokens]
    with open(os.path.join(out_dir, "vocab.json"), "w") as f:
        json.dump({"tokens": tokens, "merges": merges, "token_type": types}, f)


def field(reader, key):
    f = reader.get_field(key)
    return None if f is None else f.contents()


def encode(gguf_path: str, prompts_path: str, out_path: str) -> None:
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    r = GGUFReader(gguf_path)
    assert field(r, "tokenizer.ggml.model") == "gpt2"
    tokens = field(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    types = field(r, "tokenizer.ggml.token_type")
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(t, special=True) for t, ty in zip(tokens, types) if ty == 3]
    )
    bos = field(r, "tokenizer.ggml.bos_token_id")
    add_bos = bool(field(r, "tokenizer.ggml.add_bos_token"))
    with open(prompts_path) as f:
        prompts = json.load(f)
    out = []
    for p in prompts:
        ids = tok.encode(p, add_special_tokens=False).ids
        if add_bos:
            ids = [int(bos)] + ids
        out.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=True)})
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train(sys.argv[2])
    elif sys.argv[1] == "train-small":
        train(sys.argv[2], int(sys.argv[3]), SMALL_CORPUS)
    elif sys.argv[1] == "encode":
        encode(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(__doc__)
