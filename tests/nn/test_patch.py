"""nn.PatchEmbedding: a hand-computed 4x4 example, a stride-P convolution in NumPy, float64
gradients against central differences, and clear errors for what is not a batch of images."""
import numpy as np
import pytest

import nn
from autograd import Tensor, gradcheck


def test_a_4x4_image_with_patch_2_gives_the_hand_computed_tokens():
    pe = nn.PatchEmbedding(1, 2, 2).double()
    img = Tensor(np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4))
    #  0  1 |  2  3        patches in row-major order, each read row by row:
    #  4  5 |  6  7        top-left [0 1 4 5], top-right [2 3 6 7],
    #  ------------        bottom-left [8 9 12 13], bottom-right [10 11 14 15]
    #  8  9 | 10 11
    # 12 13 | 14 15
    np.testing.assert_array_equal(pe.patches(img).data[0], [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13],
                                                             [10, 11, 14, 15]])
    # column 0 sums a patch; column 1 is its top-left minus bottom-right pixel, plus a bias of 10
    pe.proj.weight.data[...] = [[1, 1], [1, 0], [1, 0], [1, -1]]
    pe.proj.bias.data[...] = [0, 10]
    np.testing.assert_array_equal(pe(img).data[0], [[10, 5], [18, 5], [42, 5], [50, 5]])


def test_patch_embedding_is_a_stride_p_convolution():
    rng = np.random.default_rng(0)
    B, C, H, W, P, D = 2, 3, 6, 4, 2, 5
    pe = nn.PatchEmbedding(C, P, D).double()
    x = rng.standard_normal((B, C, H, W))
    kernel = pe.proj.weight.data.T.reshape(D, C, P, P)       # Conv2d's (out, in, kh, kw) layout
    want = np.stack([np.einsum("bcij,dcij->bd", x[:, :, i:i + P, j:j + P], kernel)
                     for i in range(0, H, P) for j in range(0, W, P)], axis=1) + pe.proj.bias.data
    got = pe(Tensor(x)).data
    assert got.shape == (B, (H // P) * (W // P), D) == (B, pe.num_patches(H, W), D)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_gradients_of_input_weight_and_bias_match_central_differences():
    rng = np.random.default_rng(1)
    pe = nn.PatchEmbedding(2, 2, 3).double()
    x = Tensor(rng.standard_normal((2, 2, 4, 6)), requires_grad=True)
    w, b = pe.proj.weight, pe.proj.bias

    def fn(x, w, b):
        pe.proj.weight, pe.proj.bias = w, b
        return pe(x)

    report = gradcheck(fn, [x, w, b])
    assert report.ok and report.checked == [0, 1, 2]


@pytest.mark.parametrize("make, message", [
    (lambda: np.zeros((1, 1, 4, 4)), "float Tensor of images"),               # an array, not a Tensor
    (lambda: Tensor(np.zeros((1, 4, 4))), "float Tensor of images"),           # no channel axis
    (lambda: Tensor(np.zeros((1, 1, 4, 4), np.int64)), "float Tensor"),       # not real-valued
    (lambda: Tensor(np.zeros((1, 3, 4, 4))), "(B, 1, H, W)"),                  # wrong channels
    (lambda: Tensor(np.zeros((1, 1, 5, 4))), "multiples of patch_size=2"),    # not cut into patches
    (lambda: Tensor(np.zeros((1, 1, 0, 4))), "positive multiples"),            # empty
])
def test_what_is_not_a_batch_of_images_is_refused_by_name(make, message):
    with pytest.raises(ValueError, match="PatchEmbedding") as exc:
        nn.PatchEmbedding(1, 2, 4)(make())
    assert message in str(exc.value)


def test_sizes_must_be_positive():
    with pytest.raises(ValueError, match="positive sizes"):
        nn.PatchEmbedding(1, 0, 4)
