"""The README's Flax NNX example (the sharding guide's LogicalDotReluDot, as written) runs and
prints what its comment says."""
import os
import re
import subprocess
import sys

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def test_readme_nnx_snippet_runs_as_shown():
  text = open(README).read()
  start = text.index("    from partix import nnx")
  block = []
  for line in text[start:].splitlines():
    if line and not line.startswith("    "):
      break
    block.append(line[4:])
  code = "\n".join(block)
  want = re.search(r"print\(.*\)\s+# (.*)", code).group(1)
  env = dict(os.environ, PARTIX_NUM_CPU_DEVICES="8")
  p = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, capture_output=True,
                     text=True, timeout=120)
  assert p.returncode == 0, p.stderr[-2000:]
  assert p.stdout.strip() == want
