"""The compatibility table of docs/python.md recounted: for each JAX module, how many of JAX
0.10.2's public names (tests/golden/jax_names.json) partix's module provides. A name added or
removed without the table following fails here."""
import importlib
import json
import os
import re

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _import_every_public_module():
  """Every partix module imported (as a program under partix.as_jax sees them), so that
  submodules count as attributes of their parents whatever ran before."""
  import pkgutil

  import partix
  for info in pkgutil.walk_packages(partix.__path__, "partix."):
    if "._" not in info.name and info.name != "partix.as_jax":
      importlib.import_module(info.name)


def test_readme_table_counts_what_partix_provides():
  _import_every_public_module()
  golden = json.load(open(os.path.join(ROOT, "tests", "golden", "jax_names.json")))
  assert golden["jax_version"] == "0.10.2"
  table = open(os.path.join(ROOT, "docs", "python.md")).read()
  rows = dict(re.findall(r"^\| `(jax[\w.]*)` \| (\d+ / \d+) \|$", table, re.M))
  assert set(rows) == set(golden["modules"]), rows
  for name, jax_names in golden["modules"].items():
    try:
      module = importlib.import_module(name.replace("jax", "partix", 1))
      have = sum(n in dir(module) for n in jax_names)
    except ImportError:
      have = 0
    assert rows[name] == f"{have} / {len(jax_names)}", (name, rows[name], have)
