#!/usr/bin/env python3
"""Writes the tokenizer.json of the shipped models (data/models/{draft,target,large}; issue 25).

examples/train_pair.py trained them on bytes: token id = byte value, 256 ids, no special
tokens. The Hugging Face tokenizer with exactly that mapping is a byte-level BPE without
merges: the ByteLevel pre-tokenizer maps every byte b of the UTF-8 text to the printable
character GPT-2 gives it, the vocabulary maps that character to b, and the ByteLevel decoder
maps back. So `sequoia-run tokenize --model data/models/target` prints the bytes of its input,
and text in and out works with the shipped pair (dump --text, --prompt-text, --text).

    python3 tests/tokenizer/make_byte_tokenizer.py [MODELS_DIR]   (default: data/models)
"""
import json
import os
import sys


def byte_chars():
    """GPT-2's byte-to-character table: printable Latin-1 bytes stand for themselves, every
    other byte for the code point 256 + its rank among them."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def tokenizer():
    chars = byte_chars()
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": level,
        "post_processor": None,
        "decoder": level,
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None,
            "continuing_subword_prefix": None, "end_of_word_suffix": None,
            "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": {chars[b]: b for b in range(256)},
            "merges": [],
        },
    }


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "models")
    text = json.dumps(tokenizer(), ensure_ascii=False, indent=1) + "\n"
    for name in ("draft", "target", "large"):
        d = os.path.join(root, name)
        with open(os.path.join(d, "config.json")) as f:
            assert json.load(f)["vocab_size"] == 256, d
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(text)
        print(os.path.join(d, "tokenizer.json"))


if __name__ == "__main__":
    main()
