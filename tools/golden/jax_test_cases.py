#!/usr/bin/env python3
"""Writes the test cases of JAX's own test classes that tests/python/jax/ mirrors to
tests/golden/jax_test_cases.json: per class, every test method's name and whether JAX runs it
on CPU. tests/python/jax/test_coverage.py and tools/jax_tests_report.py count against it.

  git clone https://github.com/jax-ml/jax && git -C jax checkout jax-v0.10.2
  python3 tools/golden/jax_test_cases.py jax

A case is one test method (a parameterized method counts once; its mirror runs every
parameter). JAX does not run a method on CPU when a decorator says so
(`jtu.run_on_devices(...)` without "cpu", `jtu.skip_on_devices(..., "cpu", ...)`,
`jtu.run_on_devices("gpu")`) or when its body starts by skipping unless on GPU/TPU
(`if not jtu.test_device_matches(["gpu"...]): self.skipTest(...)`, or `if
jtu.test_device_matches(["cpu"]): self.skipTest(...)`).
"""
import ast
import json
import os
import sys

CLASSES = {
    "tests/shard_map_test.py": ["ShardMapTest"],
    "tests/pjit_test.py": ["PJitTest", "ArrayPjitTest"],
    "tests/array_test.py": ["JaxArrayTest", "ShardingTest", "RngShardingTest"],
}


def _strs(node):
  return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and
          isinstance(n.value, str)}


def _decorator_excludes_cpu(dec):
  if not isinstance(dec, ast.Call):
    return False
  name = ast.unparse(dec.func)
  args = set().union(*[_strs(a) for a in dec.args]) if dec.args else set()
  if name.endswith("run_on_devices"):
    return "cpu" not in args
  if name.endswith("skip_on_devices"):
    return "cpu" in args
  return False


def _body_excludes_cpu(fn):
  """The method's first statements skip the test on CPU."""
  for stmt in fn.body[:3]:
    if not isinstance(stmt, ast.If):
      continue
    test, skips = stmt.test, any("skipTest" in ast.unparse(s) or "SkipTest" in ast.unparse(s)
                                 for s in stmt.body)
    if not skips:
      continue
    src = ast.unparse(test)
    if "test_device_matches" not in src:
      continue
    devices = _strs(test)
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    if negated and "cpu" not in devices:
      return True
    if not negated and "cpu" in devices:
      return True
  return False


def cases(jax_root):
  out = {}
  for path, classes in CLASSES.items():
    tree = ast.parse(open(os.path.join(jax_root, path)).read())
    for node in tree.body:
      if isinstance(node, ast.ClassDef) and node.name in classes:
        methods = {}
        for fn in node.body:
          if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test"):
            cpu = not (any(_decorator_excludes_cpu(d) for d in fn.decorator_list) or
                       _body_excludes_cpu(fn))
            methods[fn.name] = {"cpu": cpu}
        out[f"{path}::{node.name}"] = methods
  return out


def main():
  if len(sys.argv) != 2:
    sys.exit("usage: jax_test_cases.py JAX_CHECKOUT (at tag jax-v0.10.2)")
  out = {"jax_version": "0.10.2", "classes": cases(sys.argv[1])}
  path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden",
                      "jax_test_cases.json")
  with open(path, "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
    f.write("\n")
  for k, v in out["classes"].items():
    print(k, len(v), "methods,", sum(m["cpu"] for m in v.values()), "on CPU")


if __name__ == "__main__":
  main()
