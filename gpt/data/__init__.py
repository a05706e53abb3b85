"""gpt.data: text in, token folders out, batches for training.

- ``folder``: a data folder in nanoGPT's layout (train.bin, val.bin, meta.json, tokenizer).
- ``prepare``: writes such a folder from text files (tokenizer training, streamed encoding).
- ``corpus``: the built-in default corpus (the standard library's sources).
- ``loader``: random training windows, resumable; fixed evaluation batches.
- ``char_tokenizer``: a character-level tokenizer for small corpora like Tiny Shakespeare.
"""
from gpt.data.folder import EOT, META_FILE, eot_id, load_tokenizer, open_tokens, read_meta  # noqa: F401
from gpt.data.prepare import prepare  # noqa: F401
