#!/usr/bin/env python3
"""Dump a Sequoia draft/target corpus (HDF5, docs/design.md section 7.2) for sequoia-accept.

Teacher forcing: each text chunk is one sequence; both models read it in one forward pass, and
every position t gives one row: the target's and the draft's logits for the same context, and
the actual next token. Works with any Hugging Face causal LM pair that shares a tokenizer.

    # a real pair (needs torch + transformers; GPU optional)
    python3 examples/dump_corpus.py --draft JackFram/llama-68m --target meta-llama/Llama-2-7b-hf \\
        --text wiki.txt --seq-len 512 --max-sequences 200 -o corpus.h5
    # synthetic logits (needs only numpy + h5py; used by the tests)
    python3 examples/dump_corpus.py --synthetic out.h5 --rows 1000 --vocab 64 --seed 1

The writer (CorpusWriter, write_corpus) needs only numpy and h5py; torch and transformers are
imported inside the model path of main(), so the module imports without them.
"""

import argparse
import os
import sys
import tempfile

import h5py
import numpy as np

FORMAT = "sequoia-corpus"
VERSION = 1
HALF_MAX = 65504.0


class CorpusWriter:
    """Streams rows into a corpus file; the file appears atomically at commit().

    dtype: "float16" or "float32" for dense logits; topk > 0 stores only the top-K logits per
    row (/m/topk_ids int32 + /m/topk_logits float32). Rows are appended per sequence with
    append(); end_sequence() closes a sequence. As a context manager it commits on success and
    removes the temporary file on an exception.
    """

    def __init__(self, path, vocab_size, draft="", target="", dtype="float16", topk=0,
                 chunk_rows=0, compression=1):
        if vocab_size < 1:
            raise ValueError(f"{path}: vocab_size {vocab_size} must be at least 1")
        if dtype not in ("float16", "float32"):
            raise ValueError(f"{path}: dtype {dtype!r}: use float16 or float32")
        if topk < 0 or topk > vocab_size:
            raise ValueError(f"{path}: topk {topk} must be between 0 (dense) and {vocab_size}")
        self.path = path
        self.vocab = int(vocab_size)
        self.topk = int(topk)
        self.dtype = np.dtype("<f4") if topk else np.dtype("<f2" if dtype == "float16" else "<f4")
        width = self.topk or self.vocab
        if chunk_rows <= 0:
            chunk_rows = max(1, min(4096, (1 << 20) // (width * self.dtype.itemsize)))
        self.chunk_rows = chunk_rows
        self.rows = 0
        self.offsets = [0]
        self.has_tokens = None
        directory = os.path.dirname(os.path.abspath(path))
        fd, self.tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp-",
                                        dir=directory)
        os.close(fd)
        try:
            self.f = h5py.File(self.tmp, "w")
            a = self.f.attrs
            a["format"] = FORMAT
            a["version"] = np.int64(VERSION)
            a["vocab_size"] = np.int64(self.vocab)
            a["draft"] = str(draft)
            a["target"] = str(target)
            opts = dict(chunks=(chunk_rows, width), maxshape=(None, width))
            if compression:
                opts.update(compression="gzip", compression_opts=int(compression), shuffle=True)
            self.opts = opts
            self.ds = {}
            for m in ("target", "draft"):
                if self.topk:
                    self.ds[m] = (self.f.create_dataset(f"/{m}/topk_ids", (0, width), "<i4", **opts),
                                  self.f.create_dataset(f"/{m}/topk_logits", (0, width), "<f4",
                                                        **opts))
                else:
                    self.ds[m] = (None, self.f.create_dataset(f"/{m}/logits", (0, width),
                                                              self.dtype, **opts))
        except BaseException:
            self.abort()
            raise

    def _check(self, name, x):
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.vocab:
            raise ValueError(f"{self.path}: /{name}/logits: expected shape (rows, {self.vocab}), "
                             f"got {x.shape}")
        bad = ~np.isfinite(x)
        if bad.any():
            r = int(np.argmax(bad.any(axis=1)))
            raise ValueError(f"{self.path}: /{name}/logits: row {self.rows + r}: not finite")
        if self.dtype.itemsize == 2 and (np.abs(x) > HALF_MAX).any():
            r = int(np.argmax((np.abs(x) > HALF_MAX).any(axis=1)))
            raise ValueError(f"{self.path}: /{name}/logits: row {self.rows + r}: a value does not "
                             f"fit in float16")
        return x

    def _topk(self, x):
        k = self.topk
        idx = np.argpartition(-x, k - 1, axis=1)[:, :k]
        val = np.take_along_axis(x, idx, axis=1)
        order = np.argsort(-val, axis=1, kind="stable")
        return (np.take_along_axis(idx, order, axis=1).astype("<i4"),
                np.take_along_axis(val, order, axis=1))

    @staticmethod
    def _extend(ds, data):
        n = ds.shape[0]
        ds.resize(n + data.shape[0], axis=0)
        ds[n:] = data

    def append(self, target_logits, draft_logits, tokens=None):
        """Appends rows of the current sequence: logits (rows, V) each; tokens (rows,) or None."""
        t = self._check("target", target_logits)
        d = self._check("draft", draft_logits)
        if t.shape[0] != d.shape[0]:
            raise ValueError(f"{self.path}: /draft/logits: {d.shape[0]} rows but /target/logits "
                             f"has {t.shape[0]}")
        n = t.shape[0]
        if self.has_tokens is not None and self.has_tokens != (tokens is not None):
            raise ValueError(f"{self.path}: /tokens: give tokens with every append or with none")
        if tokens is not None:
            tokens = np.asarray(tokens).astype("<i4").reshape(-1)
            if tokens.shape[0] != n:
                raise ValueError(f"{self.path}: /tokens: {tokens.shape[0]} tokens for {n} rows")
            if ((tokens < 0) | (tokens >= self.vocab)).any():
                r = int(np.argmax((tokens < 0) | (tokens >= self.vocab)))
                raise ValueError(f"{self.path}: /tokens: row {self.rows + r}: outside [0, "
                                 f"{self.vocab})")
        if self.has_tokens is None:
            self.has_tokens = tokens is not None
            if self.has_tokens:
                opts = dict(self.opts, chunks=(self.chunk_rows * 16,), maxshape=(None,))
                self.tok = self.f.create_dataset("/tokens", (0,), "<i4", **opts)
        if n == 0:
            return
        for m, x in (("target", t), ("draft", d)):
            ids, lg = self.ds[m]
            if self.topk:
                i, v = self._topk(x)
                self._extend(ids, i)
                self._extend(lg, v)
            else:
                self._extend(lg, x.astype(self.dtype))
        if tokens is not None:
            self._extend(self.tok, tokens)
        self.rows += n

    def end_sequence(self):
        """Closes the current sequence (no-op when it is empty)."""
        if self.rows > self.offsets[-1]:
            self.offsets.append(self.rows)

    def commit(self):
        """Finishes the file and renames it into place."""
        try:
            self.end_sequence()
            if self.rows == 0:
                raise ValueError(f"{self.path}: no rows were appended; an empty corpus is not valid")
            self.f.create_dataset("/seq_offsets", data=np.asarray(self.offsets, dtype="<i8"))
            self.f.close()
            self.f = None
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(self.tmp, 0o666 & ~mask)
            fd = os.open(self.tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self.tmp, self.path)
            self.tmp = None
        except BaseException:
            self.abort()
            raise

    def abort(self):
        """Drops the temporary file."""
        f, self.f = getattr(self, "f", None), None
        if f is not None:
            try:
                f.close()
            except Exception:
                pass
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass
            self.tmp = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.abort()
        return False


def write_corpus(path, sequences, vocab_size, draft="", target="", dtype="float16", topk=0,
                 chunk_rows=0, compression=1):
    """Writes a corpus from an iterable of sequences, each (target_logits, draft_logits, tokens)
    with logits of shape (rows, vocab_size) and tokens of shape (rows,) or None. The iterable is
    consumed one sequence at a time, so memory holds one sequence. Returns the number of rows."""
    with CorpusWriter(path, vocab_size, draft=draft, target=target, dtype=dtype, topk=topk,
                      chunk_rows=chunk_rows, compression=compression) as w:
        for seq in sequences:
            t, d = seq[0], seq[1]
            tok = seq[2] if len(seq) > 2 else None
            w.append(t, d, tok)
            w.end_sequence()
        return w.rows


def synthetic_sequences(rows, vocab, seed, sequences=1, tokens=True, block=256):
    """Correlated synthetic logits: target ~ N(0, 3^2), draft = target + N(0, 1.5^2); the next
    token is sampled from the target's softmax. Yields (target, draft, tokens) per sequence."""
    rng = np.random.default_rng(seed)
    bounds = np.linspace(0, rows, sequences + 1).astype(np.int64)
    for s in range(sequences):
        n = int(bounds[s + 1] - bounds[s])
        if n == 0:
            continue
        t = (rng.standard_normal((n, vocab)) * 3.0).astype(np.float32)
        d = (t + rng.standard_normal((n, vocab)) * 1.5).astype(np.float32)
        tok = None
        if tokens:
            g = rng.gumbel(size=(n, vocab))
            tok = np.argmax(t + g, axis=1).astype(np.int32)
        yield t, d, tok


def _text_chunks(paths, tokenizer, seq_len, mode):
    """Token id lists, one per sequence: blank-line-separated paragraphs (mode "paragraph") or
    consecutive windows (mode "window"), at most seq_len tokens each, at least 2."""
    for p in paths:
        with open(p, encoding="utf-8") as fh:
            text = fh.read()
        pieces = [x.strip() for x in text.split("\n\n")] if mode == "paragraph" else [text]
        for piece in pieces:
            if not piece:
                continue
            ids = tokenizer(piece)["input_ids"]
            step = seq_len if mode == "window" else len(ids)
            for i in range(0, len(ids), max(step, 1)):
                chunk = ids[i:i + seq_len]
                if len(chunk) >= 2:
                    yield chunk
                if mode == "paragraph":
                    break


def _model_sequences(args):
    import torch  # lazily: the writer does not need them
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = getattr(torch, args.torch_dtype)
    tok = AutoTokenizer.from_pretrained(args.target)
    dtok = AutoTokenizer.from_pretrained(args.draft)
    if tok.get_vocab() != dtok.get_vocab():
        sys.exit("dump_corpus.py: the draft and target tokenizers differ; a corpus needs one "
                 "vocabulary")
    models = [AutoModelForCausalLM.from_pretrained(m, torch_dtype=dtype).to(args.device).eval()
              for m in (args.target, args.draft)]
    vt, vd = (m.get_output_embeddings().weight.shape[0] for m in models)
    vocab = min(vt, vd)
    if vt != vd:
        print(f"dump_corpus.py: target has {vt} logits, draft {vd}; keeping the first {vocab} "
              f"(the tokenizer has {len(tok)})", file=sys.stderr)
    if len(tok) > vocab:
        sys.exit(f"dump_corpus.py: the tokenizer has {len(tok)} tokens, more than the {vocab} "
                 "logits")

    tty = sys.stderr.isatty()

    def gen():
        n = 0
        for ids in _text_chunks(args.text, tok, args.seq_len, args.chunk):
            if args.max_sequences and n >= args.max_sequences:
                return
            x = torch.tensor([ids], device=args.device)
            with torch.no_grad():
                lt = models[0](x).logits[0, :-1, :vocab].float().cpu().numpy()
                ld = models[1](x).logits[0, :-1, :vocab].float().cpu().numpy()
            n += 1
            # a count redrawn in place on a terminal; elsewhere (a log) a line every 100
            if not args.quiet and tty:
                print(f"\rdump_corpus.py: {n} sequences", end="", file=sys.stderr, flush=True)
            elif not args.quiet and n % 100 == 0:
                print(f"dump_corpus.py: {n} sequences", file=sys.stderr, flush=True)
            yield lt, ld, np.asarray(ids[1:], dtype=np.int32)
        if not args.quiet:
            print("\n" if tty else f"dump_corpus.py: {n} sequences", end="" if tty else "\n",
                  file=sys.stderr)

    return vocab, gen()


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        """Usage errors exit 64, as in the project's C tools (argparse uses 2)."""
        self.print_usage(sys.stderr)
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(64)


def main(argv=None):
    """Exit codes: 0 done, 64 usage, 65 invalid data (e.g. NaN logits), 74 I/O error."""
    ap = _Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draft", help="draft model (Hugging Face name or directory)")
    ap.add_argument("--target", help="target model (Hugging Face name or directory)")
    ap.add_argument("--text", nargs="+", default=[], help="UTF-8 text files")
    ap.add_argument("-o", "--output", help="corpus file to write")
    ap.add_argument("--seq-len", type=int, default=512, help="tokens per sequence at most")
    ap.add_argument("--chunk", choices=("paragraph", "window"), default="window",
                    help="one sequence per blank-line paragraph, or per seq-len window")
    ap.add_argument("--max-sequences", type=int, default=0, help="stop after this many (0: all)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--torch-dtype", default="float32", help="float32, bfloat16, float16")
    ap.add_argument("--synthetic", metavar="OUT", help="write synthetic logits to OUT instead")
    ap.add_argument("--rows", type=int, default=1000, help="synthetic: positions")
    ap.add_argument("--vocab", type=int, default=64, help="synthetic: vocabulary size")
    ap.add_argument("--sequences", type=int, default=4, help="synthetic: sequences")
    ap.add_argument("--seed", type=int, default=0, help="synthetic: random seed")
    ap.add_argument("--dtype", choices=("float16", "float32"), default="float16",
                    help="dense logits stored as (default float16)")
    ap.add_argument("--topk", type=int, default=0, help="store only the top-K logits per row")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.synthetic:
            if args.rows < 1 or args.vocab < 1 or args.sequences < 1 or args.sequences > args.rows:
                ap.error("--rows, --vocab >= 1 and 1 <= --sequences <= --rows")
            n = write_corpus(args.synthetic,
                             synthetic_sequences(args.rows, args.vocab, args.seed, args.sequences),
                             args.vocab, draft="synthetic-draft", target="synthetic-target",
                             dtype=args.dtype, topk=args.topk)
            out = args.synthetic
        else:
            if not (args.draft and args.target and args.text and args.output):
                ap.error("give --draft, --target, --text and -o (or --synthetic OUT)")
            vocab, seqs = _model_sequences(args)
            n = write_corpus(args.output, seqs, vocab, draft=args.draft, target=args.target,
                             dtype=args.dtype, topk=args.topk)
            out = args.output
    except (ValueError, OSError) as e:
        print(f"dump_corpus.py: {e}", file=sys.stderr)
        return 65 if isinstance(e, ValueError) else 74
    if not args.quiet:
        print(f"dump_corpus.py: wrote {n} rows to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
