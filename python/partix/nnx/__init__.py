"""partix.nnx: Flax NNX's module API (Flax 0.12's names and behaviour) over partix's
transformations.

  from partix import nnx

  class Model(nnx.Module):
    def __init__(self, rngs):
      self.linear = nnx.Linear(4, 8, rngs=rngs)
    def __call__(self, x):
      return nnx.relu(self.linear(x))
"""
from partix.nnx import filterlib  # noqa: F401
from partix.nnx.filterlib import All, Any, Everything, Not, Nothing, OfType, PathContains  # noqa
from partix.nnx.filterlib import WithTag  # noqa: F401
from partix.nnx.variables import (BatchStat, Cache, Intermediate, Param,  # noqa: F401
                                  Perturbation, Variable, VariableMetadata, use_eager_sharding,
                                  using_eager_sharding, with_metadata)
from partix.nnx.statelib import (FlatState, State, filter_state, from_flat_state,  # noqa
                                 map_state, merge_state, replace_by_pure_dict, split_state,
                                 to_flat_state, to_pure_dict)
from partix.nnx.graph import (GraphDef, clone, graphdef, iter_graph, merge, pop,  # noqa: F401
                              split, state, update)
from partix.nnx.module import (Dict, List, Module, Object, Pytree, Sequential, data,  # noqa
                               iter_modules, static, view)
from partix.nnx.rnglib import (RngCount, RngKey, RngState, RngStream, Rngs,  # noqa: F401
                               reseed, split_rngs)
from partix.nnx import spmd  # noqa: F401
from partix.nnx.spmd import (PARTITION_NAME, get_abstract_model, get_named_sharding,  # noqa
                             get_partition_spec, logical_axis_rules, with_partitioning)
from partix.nnx.transforms import (DiffState, eval_shape, grad, jit, remat,  # noqa: F401
                                   value_and_grad)
from partix.nnx.iteration import Carry, scan, vmap  # noqa: F401
from partix.nnx import nn  # noqa: F401
from partix.nnx.nn import initializers  # noqa: F401
from partix.nnx.nn.activations import *  # noqa: F401,F403
from partix.nnx.nn.attention import (MultiHeadAttention, combine_masks,  # noqa: F401
                                     dot_product_attention, make_attention_mask,
                                     make_causal_mask)
from partix.nnx.nn.linear import Embed, Linear, LinearGeneral  # noqa: F401
from partix.nnx.nn.normalization import BatchNorm, LayerNorm, RMSNorm  # noqa: F401
from partix.nnx.nn.stochastic import Dropout  # noqa: F401
from partix.nnx import training  # noqa: F401
from partix.nnx.training import metrics, optimizer  # noqa: F401
from partix.nnx.training.metrics import Metric, MultiMetric  # noqa: F401
from partix.nnx.training.optimizer import (ModelAndOptimizer, OptArray, OptState,  # noqa
                                           OptVariable, Optimizer)


def __getattr__(name):
  raise AttributeError(f"module 'partix.nnx' has no attribute {name!r}: partix.nnx does not "
                       f"provide flax.nnx.{name}")
