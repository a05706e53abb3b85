"""Encoding: text -> ids, merged by rank as tiktoken does (see ``piece_encoder``)."""
