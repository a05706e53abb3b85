"""bpe: a byte-level BPE tokenizer that trains incrementally and encodes like tiktoken.

    from bpe import Tokenizer, GPT4_PATTERN
    tok = Tokenizer.train(["corpus.txt"], vocab_size=8192, pattern=GPT4_PATTERN,
                          special_tokens=["<|endoftext|>"])
    ids = tok.encode("hello world", allowed_special="all")
    assert tok.decode(ids) == "hello world"

The package (training and encoding import the shared modules, never each other):

    tokenizer.py        Tokenizer: the public API; it calls into the folders below
    cli.py              the ``bpe`` command
    split/              pre-tokenization, shared: the patterns and their safe cuts (patterns),
                        their standard-library ``re`` twins that find the chunks (twins), the
                        rule and time budget that bound a pattern from a file (redos)
    text.py, nogc.py,   shared helpers: str -> bytes as tiktoken makes them, byte words in NumPy;
    workers.py          the paused garbage collector; the default number of processes
    train/              text -> merges. trainer (the entry point) -> parallel_count (processes)
                        -> chunk_counter (one process) -> chunk_table (counts as arrays) ->
                        merge_learner (the incremental loop), whose first merges run in NumPy
                        (early_merges); counts_file (``bpe count`` shards), mpi_count (``mpiexec``)
    encode/             text -> ids. piece_encoder (split, cache, merge new pieces) merges one
                        piece by rank (rank_merge) or many in NumPy (batch_merge); special
                        (tiktoken's special-token policy); parallel_encode (encode_batch)
    files/              what is read and written: corpus (training inputs), bpe_json (our format),
                        tiktoken_file, huggingface (tokenizer.json, GPT-2's files), jsonio
                        (readers that name the file), schema (fields' types and ids, by path),
                        atomic (the project's one atomic writer), lock (one writer at a time),
                        write_set (several files as one unit: ``bpe train``'s outputs)
"""
from .files.corpus import default_corpus_files
from .split.patterns import GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN
from .tokenizer import Tokenizer

__all__ = ["Tokenizer", "GPT2_PATTERN", "GPT4_PATTERN", "O200K_PATTERN", "default_corpus_files"]
