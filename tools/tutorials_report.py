"""Runs the code cells of JAX's documentation pages (MyST markdown) on partix and reports,
page by page, the cells that fail. A page's cells run in order in one namespace, as a notebook
would, with partix installed as `jax` (partix.as_jax); a cell tagged `raises-exception` passes
when it raises. Nothing of JAX's is copied into the project: the pages are read from a JAX
checkout given on the command line.

  python tools/tutorials_report.py JAX_DOCS_DIR [PAGE.md ...] [--verbose]
  python tools/tutorials_report.py JAX_DOCS_DIR --jax > tools/golden/tutorial_cells_jax.json

Run with PYTHONPATH pointing at the built package and PARTIX_NUM_CPU_DEVICES=8 (JAX's pages
ask for 8 CPU devices through XLA_FLAGS or jax.config; partix reads its own variable).

With --jax the pages run on JAX itself (in an environment that has it) and the cells that fail
there are written as JSON: the baseline. A cell that fails under JAX too (a snippet that needs
a name from an earlier page, a module the page imports, more devices) is listed but not
counted against partix. Pages without notebook cells run their ```python blocks, after the
imports every such page assumes (_PRELUDE)."""
import contextlib
import io
import json
import os
import re
import sys
import time
import traceback

# The pages of JAX's documentation that teach its core transformations and sharding.
PAGES = [
    "key-concepts.md", "jit-compilation.md", "automatic-vectorization.md",
    "automatic-differentiation.md", "pytrees.md", "random-numbers.md", "control-flow.md",
    "stateful-computations.md", "gradient-checkpointing.md", "jacobian-vector-products.md",
    "external-callbacks.md", "aot.md", "buffer_donation.md", "default_dtypes.md",
    "custom_pytrees.md", "array_refs.md", "higher-order.md", "tracing.md",
    "debugging/print_breakpoint.md", "notebooks/thinking_in_jax.md",
    "notebooks/autodiff_cookbook.md", "notebooks/Common_Gotchas_in_JAX.md",
    "notebooks/Custom_derivative_rules_for_Python_code.md", "notebooks/autodiff_remat.md",
    "notebooks/vmapped_log_probs.md", "notebooks/convolutions.md", "notebooks/shard_map.md",
    "migrate_pmap.md", "parallel.md",
]

_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.S | re.M)
_PYTHON = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)


def _notebook_cell(block):
  """(source, expects_error) of a MyST code cell: leading `:key: value` lines (and a `---`
  fence around them) are options; shell and magic lines are dropped."""
  tags, body, in_opts = "", [], True
  for ln in block.splitlines():
    if in_opts and ln.startswith(":"):
      tags += ln
      continue
    if in_opts and ln.strip() == "---":
      continue
    in_opts = False
    body.append(ln)
  src = "\n".join(l for l in body if not l.lstrip().startswith(("%", "!")))
  return src, "raises-exception" in tags


def _python_block(block):
  """(source, expects_error) of a ```python block: a doctest block keeps only its `>>>` and
  `...` lines (the rest is printed output); a traceback in the expected output means the
  block raises."""
  lines = block.splitlines()
  if not any(l.lstrip().startswith(">>>") for l in lines):
    return block, False
  src = []
  for l in lines:
    t = l.lstrip()
    if t.startswith(">>>") or (t.startswith("... ") or t == "...") and src:
      src.append(t[4:])
  return "\n".join(src), any(l.startswith("Traceback") for l in lines)


def cells(text):
  """(source, expects_error) of each code cell of a page: its MyST code cells, or, on a page
  with none, its ```python blocks (plain or doctest), in order."""
  out = [_notebook_cell(m.group(1)) for m in _CELL.finditer(text)]
  if out:
    return out
  return [_python_block(m.group(1)) for m in _PYTHON.finditer(text)]


_PRELUDE = ("import functools\nfrom functools import partial\nimport numpy as np\nimport jax\n"
            "import jax.numpy as jnp\nfrom jax import lax\n")


def run_page(path, verbose=False):
  """Runs one page's cells; returns (number of cells, [(index, first source line, error)])."""
  ns = {"__name__": "__main__"}
  failures = []
  text = open(path).read()
  page_cells = cells(text)
  if not _CELL.search(text):
    exec(_PRELUDE, ns)
  for i, (src, expects_error) in enumerate(page_cells):
    err = None
    sink = io.StringIO()
    try:
      with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        exec(compile(src, f"{os.path.basename(path)}[{i}]", "exec"), ns)
    except BaseException as e:  # noqa: BLE001 - a cell may raise anything
      if isinstance(e, KeyboardInterrupt):
        raise
      err = e
    if err is not None and not expects_error:
      line = traceback.format_exception_only(type(err), err)[-1].strip()
      failures.append((i, src.strip().splitlines()[0] if src.strip() else "", line[:300]))
      if verbose:
        traceback.print_exception(err)
  return len(page_cells), failures


def main(argv):
  verbose, reference = "--verbose" in argv, "--jax" in argv
  args = [a for a in argv if a not in ("--verbose", "--jax")]
  if not args:
    print(__doc__)
    return 2
  docs = args[0]
  pages = args[1:] or PAGES
  if reference:
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    return write_baseline(docs, pages)
  import partix.as_jax  # noqa: F401 - installs partix as `jax`
  baseline = {}
  here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden",
                      "tutorial_cells_jax.json")
  if os.path.exists(here):
    baseline = json.load(open(here))
  total_cells = total_failed = pages_clean = excused = 0
  for page in pages:
    path = os.path.join(docs, page)
    if not os.path.exists(path):
      print(f"{page}: not found")
      continue
    t0 = time.time()
    n, failures = run_page(path, verbose)
    jax_fails = set(baseline.get(page, []))
    n -= len(jax_fails)
    excused += len(jax_fails)
    ours = [f for f in failures if f[0] not in jax_fails]
    total_cells += n
    total_failed += len(ours)
    pages_clean += not ours
    print(f"{page}: {n - len(ours)} of {n} cells run ({time.time() - t0:.1f} s)")
    for i, first, err in failures:
      note = " [fails under JAX too]" if i in jax_fails else ""
      print(f"  cell {i} ({first[:60]}){note}: {err}")
  print(f"pages with every cell running: {pages_clean} of {len(pages)}; "
        f"cells: {total_cells - total_failed} of {total_cells} "
        f"({excused} cells that fail under JAX 0.10.2 itself not counted)")
  return 0


def write_baseline(docs, pages):
  """Runs the pages on JAX (no partix) and prints {page: [failing cell indices]} as JSON."""
  import jax  # noqa: F401 - the reference
  out = {}
  for page in pages:
    path = os.path.join(docs, page)
    if os.path.exists(path):
      out[page] = [i for i, _, _ in run_page(path)[1]]
      print(f"{page}: {out[page]}", file=sys.stderr)
  print(json.dumps({"jax": jax.__version__, **out}, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
