"""partix.models.llama: Llama models (GGUF files, Hugging Face folders) loaded onto a mesh with
Megatron tensor parallelism, and text generation.

  from partix.models import llama
  model = llama.load(llama.default_model_path(), mesh)   # mesh with a 'model' axis
  print(model.generate("What is the capital of France?", max_tokens=32, chat=True).text)
"""
import collections

from partix import _core
from partix._src.core import PartixError, wrap
from partix._src.sharding import Mesh

__all__ = ["Generation", "Model", "default_model_path", "load"]

Generation = collections.namedtuple("Generation", ["text", "tokens"])
Generation.__doc__ = "A generation's decoded text (special tokens skipped) and its new token ids."


def default_model_path():
  """The cached SmolLM2-135M-Instruct GGUF (scripts/fetch_smollm2.sh fills the cache)."""
  return _core.llama_default_model_path()


def _check_mesh(mesh, axis, api):
  if not isinstance(mesh, Mesh):
    raise PartixError(f"[{api}] mesh must be a partix.sharding.Mesh, got {type(mesh).__name__}")
  if axis not in mesh.axis_names:
    raise PartixError(f"[{api}] the mesh has no axis '{axis}' (its axes: {mesh.axis_names})")


def load(path, mesh, *, axis="model", dtype="float32", quantized=False, stacked=True):
  """Loads a GGUF file or a Hugging Face folder (config.json, *.safetensors, tokenizer.json)
  onto `mesh`, heads, MLP and vocabulary split over the mesh axis `axis`. dtype: the weight
  matrices' dtype ('float32', 'bfloat16' or 'float16'); quantized: GGUF's quantized matrices
  stay quantized (matmuls decode their blocks); stacked: the layers' parameters stacked over
  layers ('model.layers.mlp.up_proj.weight' [L, ...], run as a scan), or per layer
  ('model.layers.0.mlp.up_proj.weight', unrolled)."""
  _check_mesh(mesh, axis, "llama.load")
  names = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
  dt = getattr(dtype, "__name__", None) or getattr(dtype, "name", None) or str(dtype)
  if dt not in names:
    raise PartixError(f"[llama.load] dtype must be one of {sorted(names)}, got {dtype!r}")
  return Model(
      _core.llama_load(str(path), mesh._auto_core(), axis, bool(quantized), names[dt], bool(stacked)), mesh)


class Model:
  """A loaded Llama: config (a dict), params (name -> Array, sharded), its tokenizer
  (encode / decode / apply_chat_template) and generate."""

  def __init__(self, handle, mesh):
    self._h = handle
    self.mesh = mesh
    self.config = handle.config
    self.source = handle.source

  @property
  def params(self):
    return {k: wrap(v) for k, v in self._h.params.items()}

  def encode(self, text):
    return list(self._h.encode(str(text)))

  def decode(self, tokens, skip_special_tokens=True):
    return self._h.decode([int(t) for t in tokens], bool(skip_special_tokens))

  def apply_chat_template(self, messages, add_generation_prompt=True):
    """messages: [{'role': 'user', 'content': ...}, ...] as Hugging Face's tokenizers take."""
    try:
      pairs = [(str(m["role"]), str(m["content"])) for m in messages]
    except (TypeError, KeyError):
      raise PartixError("[llama.apply_chat_template] messages must be dicts with 'role' and "
                        f"'content', got {messages!r}") from None
    return self._h.apply_chat_template(pairs, bool(add_generation_prompt))

  def generate(self, prompt, max_tokens=32, *, temperature=0.0, top_k=0, top_p=1.0, seed=0,
               chat=False, stop_at_eos=True, decode_loop=False):
    """Generates up to max_tokens after `prompt` (a string, a list of token ids, or a list of
    either for a batch): greedy at temperature 0, else sampled (top_k 0 and top_p 1 are off).
    chat applies the model's chat template to a string prompt. Returns a Generation (text,
    tokens), or a list of them for a batch."""
    api = "llama.generate"
    batch = isinstance(prompt, (list, tuple)) and prompt and not isinstance(prompt[0], int)
    prompts = list(prompt) if batch else [prompt]
    ids = []
    for p in prompts:
      if isinstance(p, str):
        text = self.apply_chat_template([{"role": "user", "content": p}]) if chat else p
        ids.append(self.encode(text))
      elif isinstance(p, (list, tuple)) and all(isinstance(t, int) for t in p):
        # The core checks each id against the vocabulary; ids past int32 stop here.
        bad = [t for t in p if not -2**31 <= t < 2**31]
        if bad:
          raise PartixError(f"[{api}] token id {bad[0]} of prompt {p!r} is outside the "
                            "vocabulary")
        ids.append([int(t) for t in p])
      else:
        raise PartixError(f"[{api}] a prompt must be a string or a list of token ids, got {p!r}")
      if not ids[-1]:
        raise PartixError(f"[{api}] prompt {p!r} has no tokens")
    if not isinstance(max_tokens, int) or max_tokens < 1:
      raise PartixError(f"[{api}] max_tokens must be a positive integer, got {max_tokens!r}")
    if not temperature >= 0:
      raise PartixError(f"[{api}] temperature must be >= 0, got {temperature!r}")
    out = self._h.generate(ids, max_tokens, float(temperature), int(top_k), float(top_p),
                           int(seed), bool(stop_at_eos), bool(decode_loop))
    gens = [Generation(self.decode(t), list(t)) for t in out]
    return gens if batch else gens[0]
