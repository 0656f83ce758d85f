"""partix.models: the model library (Llama inference, GPT-2 training) over the C++ models."""
from partix.models import gpt2, llama  # noqa: F401
