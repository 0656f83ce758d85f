"""partix.profiler: a Perfetto/Chrome trace of every device's ops and collectives."""
import contextlib
import os

from partix import _core


def start_trace(log_dir, create_perfetto_link=False, create_perfetto_trace=False):
  global _dir
  _dir = str(log_dir)
  _core.profiler_start()


def stop_trace():
  _core.profiler_stop()
  os.makedirs(_dir, exist_ok=True)
  path = os.path.join(_dir, "partix.trace.json")
  _core.profiler_write_chrome_trace(path)
  return path


@contextlib.contextmanager
def trace(log_dir, create_perfetto_link=False, create_perfetto_trace=False):
  """Records every device's ops into log_dir/partix.trace.json (open it in ui.perfetto.dev)."""
  start_trace(log_dir)
  try:
    yield
  finally:
    stop_trace()


def spans():
  """The recorded spans: (device, name, category, start_us, duration_us)."""
  return _core.profiler_spans()


class TraceAnnotation(contextlib.nullcontext):
  def __init__(self, name, **kw):
    super().__init__()


def annotate_function(func, name=None, **kw):
  return func


def device_memory_profile(backend=None):
  return repr({d.id: _core.memory_stats(d.id) for d in _core.devices()}).encode()


_dir = "."
