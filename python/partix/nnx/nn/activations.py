"""The activation functions of partix.nn under nnx's names."""
from partix.nn import (celu, elu, gelu, glu, hard_sigmoid, hard_silu, hard_swish,  # noqa: F401
                       hard_tanh, identity, leaky_relu, log_sigmoid, log_softmax, logsumexp,
                       one_hot, relu, relu6, selu, sigmoid, silu, soft_sign, softmax, softplus,
                       standardize, swish, tanh)
