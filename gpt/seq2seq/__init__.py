"""The other two transformer families on nn.Transformer's layers: the 2017 encoder-decoder
translator and an encoder-only model, with built-in number data (`gpt translate`)."""
