#!/usr/bin/env python3
"""Counts how much of JAX's own test classes tests/python/jax/ mirrors, and writes
docs/jax_tests.md: per class, JAX's CPU cases, mirrored and passing, mirrored and marked as
differing (an xfail with its reason), left out (with the reason), and not yet mirrored.

  python3 tools/jax_tests_report.py          rewrites docs/jax_tests.md
  python3 tools/jax_tests_report.py --check  fails when docs/jax_tests.md is out of date

The cases are tests/golden/jax_test_cases.json (tools/golden/jax_test_cases.py). A mirror
file declares the JAX class it follows (JAX_CLASS = "tests/pjit_test.py::PJitTest") and the
cases it leaves out (LEFT_OUT = {"test_name": "reason"}); its test functions carry the names
of the JAX methods they mirror. A mirror counts as passing only when neither it nor any of
its parameters is marked xfail. Read statically (ast), so the report needs no partix build.
"""
import ast
import glob
import json
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
DOC = os.path.join(ROOT, "docs", "jax_tests.md")


def _text(node, consts):
  """A reason's text: a literal, or a module-level string constant named by it."""
  if isinstance(node, ast.Name) and node.id in consts:
    return consts[node.id]
  try:
    return ast.literal_eval(node)
  except ValueError:
    return ast.unparse(node)


def _xfail_reasons(node, consts, values, seen=None):
  """The reasons of every pytest.mark.xfail inside `node` (decorators and pytest.param),
  following names of module-level values (a parameter list defined apart) into them."""
  seen = set() if seen is None else seen
  out = []
  for n in ast.walk(node):
    if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("mark.xfail"):
      reason = [k.value for k in n.keywords if k.arg == "reason"]
      out.append(_text(reason[0], consts) if reason else "(no reason given)")
    elif isinstance(n, ast.Name) and n.id in values and n.id not in seen:
      seen.add(n.id)
      out += _xfail_reasons(values[n.id], consts, values, seen)
  return out


def _string_constants(tree):
  out = {}
  for node in tree.body:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
        node.targets[0], ast.Name) and isinstance(node.value, ast.Constant) and isinstance(
            node.value.value, str):
      out[node.targets[0].id] = node.value.value
  return out


def read_mirrors():
  """{class: {"tests": {name: [xfail reasons]}, "left_out": {name: reason}, "files": [...]}}"""
  out = {}
  for path in sorted(glob.glob(os.path.join(ROOT, "tests", "python", "jax", "test_*.py"))):
    tree = ast.parse(open(path).read())
    consts = {}
    for node in tree.body:
      if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
          node.targets[0], ast.Name) and node.targets[0].id in ("JAX_CLASS", "LEFT_OUT"):
        consts[node.targets[0].id] = ast.literal_eval(node.value)
    if "JAX_CLASS" not in consts:
      continue
    entry = out.setdefault(consts["JAX_CLASS"], {"tests": {}, "left_out": {}, "files": []})
    entry["files"].append(os.path.relpath(path, ROOT))
    entry["left_out"].update(consts.get("LEFT_OUT", {}))
    strings = _string_constants(tree)
    values = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
              for t in node.targets if isinstance(t, ast.Name)}
    for node in tree.body:
      if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
        reasons = []
        for d in node.decorator_list:
          reasons += _xfail_reasons(d, strings, values)
        entry["tests"][node.name] = reasons
  return out


def summary():
  golden = json.load(open(os.path.join(ROOT, "tests", "golden", "jax_test_cases.json")))
  mirrors = read_mirrors()
  rows, problems = [], []
  for cls, methods in golden["classes"].items():
    m = mirrors.get(cls, {"tests": {}, "left_out": {}, "files": []})
    cpu = {n for n, v in methods.items() if v["cpu"]}
    for n in list(m["tests"]) + list(m["left_out"]):
      if n not in methods:
        problems.append(f"{cls}: {n} is not a test of JAX's class")
    for n in set(m["tests"]) & set(m["left_out"]):
      problems.append(f"{cls}: {n} is both mirrored and left out")
    passing = sorted(n for n in cpu if n in m["tests"] and not m["tests"][n])
    differing = sorted(n for n in cpu if m["tests"].get(n))
    left = sorted(n for n in cpu if n in m["left_out"] and n not in m["tests"])
    todo = sorted(n for n in cpu if n not in m["tests"] and n not in m["left_out"])
    rows.append(dict(cls=cls, cpu=len(cpu), passing=passing, differing=differing, left=left,
                     todo=todo, m=m))
  return golden["jax_version"], rows, problems


def render():
  version, rows, problems = summary()
  lines = [
      "# JAX's own tests on partix",
      "",
      f"tests/python/jax/ mirrors the test classes below of JAX {version}, case by case: the",
      "same calls, inputs and expected results, written anew, each test named after the JAX",
      "method it follows (a parameterized method is one case; its mirror runs every",
      "parameter). `JAX on CPU` counts the methods JAX itself runs on CPU. A case that differs",
      "is mirrored with JAX's expectation and marked xfail (strict: it fails the suite once it",
      "passes, so this page cannot go stale); a case left out says why. Written by",
      "`tools/jax_tests_report.py` from the test files; `tests/python/jax/test_coverage.py`",
      "checks it is current.",
      "",
      "| JAX class | JAX on CPU | pass | differ | left out | not yet mirrored |",
      "|---|---|---|---|---|---|",
  ]
  tot = [0, 0, 0, 0, 0]
  for r in rows:
    vals = [r["cpu"], len(r["passing"]), len(r["differing"]), len(r["left"]), len(r["todo"])]
    tot = [a + b for a, b in zip(tot, vals)]
    lines.append(f"| `{r['cls']}` | " + " | ".join(map(str, vals)) + " |")
  lines.append("| all | " + " | ".join(map(str, tot)) + " |")
  lines += ["", f"Passing: {tot[1]} of {tot[0]} CPU cases ({100.0 * tot[1] / tot[0]:.0f}%).", ""]
  for r in rows:
    if not (r["differing"] or r["left"]):
      continue
    lines += [f"## `{r['cls']}`", ""]
    if r["m"]["files"]:
      lines += ["Mirrored in " + ", ".join(f"`{f}`" for f in r["m"]["files"]) + ".", ""]
    for n in r["differing"]:
      lines.append(f"- `{n}` differs: " + "; ".join(sorted(set(r["m"]["tests"][n]))))
    for n in r["left"]:
      lines.append(f"- `{n}` left out: {r['m']['left_out'][n]}")
    lines.append("")
  return "\n".join(lines).rstrip() + "\n", problems


def main():
  text, problems = render()
  if problems:
    sys.exit("\n".join(problems))
  if "--check" in sys.argv:
    current = open(DOC).read() if os.path.exists(DOC) else ""
    if current != text:
      sys.exit("docs/jax_tests.md is out of date: run tools/jax_tests_report.py")
    return
  os.makedirs(os.path.dirname(DOC), exist_ok=True)
  with open(DOC, "w") as f:
    f.write(text)
  print(text.split("\n\n")[2])


if __name__ == "__main__":
  main()
