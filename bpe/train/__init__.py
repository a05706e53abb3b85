"""Training: text -> chunk counts -> merges (see ``trainer`` for the entry point)."""
