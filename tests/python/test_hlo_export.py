"""Lowered.compiler_ir(dialect='hlo'): the traced program as XLA HLO text. The texts of
hlo_programs.py were read by XLA's own HLO parser and the unsharded ones run by XLA
(tools/golden/hlo_export.py -> tests/golden/hlo_export.json): partix must still write those
texts, and its results must equal XLA's results of running them."""
import json
import os
import re

import numpy as np
import pytest

import hlo_programs
import partix
import partix.numpy as jnp
from partix._src.core import PartixError

GOLDEN = json.load(open(os.path.join(os.path.dirname(__file__), "..", "golden",
                                     "hlo_export.json")))
PROGRAMS = hlo_programs.programs()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_text_is_what_xla_read(name):
  fn, args, mesh = PROGRAMS[name]
  assert hlo_programs.hlo_text(fn, args, mesh) == GOLDEN["programs"][name]["text"]


@pytest.mark.parametrize("name", sorted(k for k, v in PROGRAMS.items() if v[2] is None))
def test_results_equal_xla_running_the_text(name):
  fn, args, _ = PROGRAMS[name]
  ours = partix.tree_util.tree_leaves(partix.jit(fn)(*args))
  theirs = GOLDEN["programs"][name]["xla_results"]
  assert len(ours) == len(theirs)
  for o, t in zip(ours, theirs):
    o = np.asarray(o)
    assert str(o.dtype) == t["dtype"] and list(o.shape) == t["shape"]
    np.testing.assert_allclose(o.astype(np.float64).ravel(), t["values"], rtol=2e-6, atol=1e-6)


def test_shape_of_the_text():
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  text = partix.jit(lambda x: jnp.sum(x * x, axis=0)).lower(x).compiler_ir("hlo").as_hlo_text()
  assert text.startswith("HloModule jit__lambda_, entry_computation_layout="
                         "{(f32[2,3]{1,0})->f32[3]{0}}")
  assert re.search(r"= f32\[2,3\]\{1,0\} multiply\(Arg_0\.\d+, Arg_0\.\d+\)", text)
  assert re.search(r"ROOT reduce\.\d+ = f32\[3\]\{0\} reduce\(multiply\.\d+, constant\.\d+\), "
                   r"dimensions=\{0\}, to_apply=region\.\d+", text)


def test_sharded_arguments_carry_tile_assignments():
  text = GOLDEN["programs"]["sharded"]["text"]
  # x: f32[8,4] split 4 ways on dim 0 ('a') and 2 on dim 1 ('b'); w: P(None, 'b'), replicated
  # over 'a'; the constraint is JAX's Sharding custom call.
  assert "f32[8,4]{1,0} parameter(0), sharding={devices=[4,2]0,1,2,3,4,5,6,7}" in text
  assert ("f32[4,6]{1,0} parameter(1), sharding={devices=[1,2,4]0,2,4,6,1,3,5,7 "
          "last_tile_dim_replicate}") in text
  assert 'custom_call_target="Sharding", sharding={devices=[4,1,2]0,1,2,3,4,5,6,7 ' \
         'last_tile_dim_replicate}' in text


def test_the_same_program_gives_the_same_text():
  # optax's test_abs_sq_hlo_equivalence: (x.conj() * x).real is x * x for real x.
  x = np.float32([1, 2])
  t1 = partix.jit(lambda x: (x.conj() * x).real).lower(x).compiler_ir("hlo").as_hlo_text()
  t2 = partix.jit(lambda x: x * x).lower(x).compiler_ir("hlo").as_hlo_text()
  assert t1 == t2


def test_ops_without_hlo_form_are_refused_by_name():
  with pytest.raises(PartixError, match=r"compiler_ir\(dialect='hlo'\).*'cumsum'"):
    partix.jit(lambda x: jnp.cumsum(x)).lower(np.ones(3, np.float32)).compiler_ir("hlo")
  with pytest.raises(PartixError, match="not StableHLO"):
    partix.jit(lambda x: x).lower(np.ones(3, np.float32)).compiler_ir("stablehlo")
  with pytest.raises(PartixError, match="no HLO element type"):
    partix.jit(lambda w: w).lower(
        partix.ShapeDtypeStruct((32,), jnp.q8_0)).compiler_ir("hlo")
