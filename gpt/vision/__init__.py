"""The Vision Transformer: patches of an image as tokens through nn.TransformerEncoder, its image
data (scikit-learn's digits or a procedural set) and its training runs (`gpt vit`)."""
