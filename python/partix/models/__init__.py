"""partix.models: the model library (Llama inference, GPT-2 training) over the C++ models."""
