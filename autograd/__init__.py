"""autograd package."""
