"""partix.models.gpt2: GPT-2 (Hugging Face names) on a mesh with axes ('data', 'model'): data
parallel over 'data', Megatron tensor parallel over 'model', FSDP (parameters and optimizer
state also split over 'data') with fsdp=True.

Either drive the C++ Trainer (Trainer(...).step() in a Python loop), or write the step:

  params = gpt2.init(cfg, jax.random.key(0), mesh, fsdp=True)
  opt = optim.adamw_init(params)
  step = jax.jit(functools.partial(gpt2.train_step, config=cfg))
  params, opt, loss = step(params, opt, ids, targets, lr)
"""
from partix import _core
from partix import optim
from partix._src.api import value_and_grad
from partix._src.core import PartixError, core, wrap
from partix._src.prng import key_data
from partix._src.sharding import AxisType, Mesh, NamedSharding, make_mesh as _make_mesh

__all__ = ["Config", "Trainer", "forward", "init", "loss", "make_mesh", "param_shardings",
           "small", "tiny", "train_step"]

Config = _core.Gpt2Config


def tiny():
  """Byte vocabulary (256), 64 positions, C=64, 2 layers, 4 heads."""
  return _core.gpt2_tiny()


def small():
  """GPT-2 small: 124M parameters."""
  return _core.gpt2_small()


def _config(config, api):
  if isinstance(config, str):
    if config not in ("tiny", "small"):
      raise PartixError(f"[{api}] config must be 'tiny', 'small' or a gpt2.Config, got "
                        f"{config!r}")
    return tiny() if config == "tiny" else small()
  if not isinstance(config, Config):
    raise PartixError(f"[{api}] config must be a gpt2.Config, got {type(config).__name__}")
  return config


def _mesh(mesh, api):
  if not isinstance(mesh, Mesh):
    raise PartixError(f"[{api}] mesh must be a partix.sharding.Mesh, got {type(mesh).__name__}")
  for ax in ("data", "model"):
    if ax not in mesh.axis_names:
      raise PartixError(f"[{api}] the mesh needs axes 'data' and 'model', got {mesh.axis_names}")
  return mesh._auto_core()


def make_mesh(data=1, model=1):
  """A (data, model) mesh of data*model devices."""
  return _make_mesh((data, model), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def param_shardings(config, mesh, fsdp=False):
  """Each parameter's NamedSharding on mesh (name -> NamedSharding)."""
  c = _config(config, "gpt2.param_shardings")
  return {k: NamedSharding._wrap(v)
          for k, v in _core.gpt2_param_shardings(c, _mesh(mesh, "gpt2.param_shardings"),
                                                 bool(fsdp)).items()}


def init(config, key, mesh, fsdp=False):
  """Fresh parameters (name -> Array), each drawn in its sharding; the same values on every mesh."""
  c = _config(config, "gpt2.init")
  return {k: wrap(v) for k, v in _core.gpt2_init(c, core(key_data(key)), _mesh(mesh, "gpt2.init"),
                                                 bool(fsdp)).items()}


def _params(params, api):
  return optim._params(params, api, "params")


def forward(params, ids, config):
  """Logits [B, T, V] for token ids [B, T]."""
  c = _config(config, "gpt2.forward")
  return wrap(_core.gpt2_forward(_params(params, "gpt2.forward"), core(ids), c))


def loss(params, ids, targets, config, dropout_key=None):
  """Mean next-token cross entropy of ids [B, T] against targets [B, T]; dropout_key turns
  dropout on (training). Traces: use under jit and grad."""
  c = _config(config, "gpt2.loss")
  k = None if dropout_key is None else core(key_data(dropout_key))
  return wrap(_core.gpt2_loss(_params(params, "gpt2.loss"), core(ids, "int32"),
                              core(targets, "int32"), c, k))


def train_step(params, opt_state, ids, targets, lr, dropout_key=None, *, config, clip=1.0,
               weight_decay=0.1, b1=0.9, b2=0.95):
  """One training step as the C++ Trainer takes it: value_and_grad of the loss, clipping to the
  global norm, AdamW. Returns (params, opt_state, loss). Jit it (config and the floats are
  static: bind them with functools.partial)."""
  c = _config(config, "gpt2.train_step")
  value, grads = value_and_grad(lambda p: loss(p, ids, targets, c, dropout_key))(params)
  grads, _ = optim.clip_by_global_norm(grads, clip)
  params, opt_state = optim.adamw_update(params, grads, opt_state, lr, b1=b1, b2=b2,
                                         weight_decay=weight_decay)
  return params, opt_state, value


def _reference_step(params, opt_state, ids, targets, lr, dropout_key=None, *, config, clip=1.0,
                    weight_decay=0.1):
  """train_step run by C++ alone (its value_and_grad, eagerly): the reference for tests."""
  c = _config(config, "gpt2.train_step")
  p, s, v = _core.gpt2_reference_step(
      _params(params, "gpt2.train_step"), optim._core_state(opt_state, "gpt2.train_step"),
      core(ids, "int32"), core(targets, "int32"), optim._lr(lr, "gpt2.train_step"),
      None if dropout_key is None else core(key_data(dropout_key)), c, float(clip), float(weight_decay))
  return optim._wrap_params(p), optim._wrap_state(s), wrap(v)


class Trainer:
  """The C++ trainer (as `partix train`) on stage x data x model devices: the corpus (text files
  and folders; Debian's fortunes by default) read as bytes, warmup + cosine learning rate,
  clipping, AdamW. step() runs one step and returns its loss. stages > 1 pipelines the layers
  over a 'stage' axis: `schedule` ("gpipe", "1f1b" or "interleaved" with `virtual_stages`)
  over `microbatches`."""

  def __init__(self, config="tiny", *, data=1, model=1, fsdp=False, steps=50, batch=8, seq=64,
               lr=1e-3, warmup=10, clip=1.0, weight_decay=0.1, seed=0, scan_layers=True,
               corpus=None, stages=1, microbatches=1, schedule="1f1b", virtual_stages=1):
    c = _config(config, "gpt2.Trainer")
    for name, v in (("data", data), ("model", model), ("steps", steps), ("batch", batch),
                    ("seq", seq), ("stages", stages), ("microbatches", microbatches),
                    ("virtual_stages", virtual_stages)):
      if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise PartixError(f"[gpt2.Trainer] {name} must be a positive integer, got {v!r}")
    if not isinstance(schedule, str):
      raise PartixError(f"[gpt2.Trainer] schedule must be gpipe, 1f1b or interleaved, got {schedule!r}")
    self._t = _core.Gpt2Trainer(c, data, model, bool(fsdp), steps, batch, seq, float(lr),
                                int(warmup), float(clip), float(weight_decay), int(seed),
                                bool(scan_layers), [str(f) for f in (corpus or [])], stages,
                                microbatches, schedule, virtual_stages)
    self.config = c

  def step(self):
    """Runs one training step; returns its loss (a float)."""
    return self._t.step()

  @property
  def params(self):
    """The parameters, per layer under Hugging Face's names."""
    return {k: wrap(v) for k, v in self._t.params().items()}

  @property
  def mesh(self):
    return Mesh._wrap(self._t.mesh)

  @property
  def step_count(self):
    return self._t.step_count()

  def sharding_table(self):
    return self._t.sharding_table()
