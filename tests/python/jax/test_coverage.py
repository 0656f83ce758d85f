"""docs/jax_tests.md is what the mirrors of JAX's test classes say: every mirrored or left-out
name is a real JAX test of its class, none is both, and the page's counts and lists are those
tools/jax_tests_report.py computes from the files as they are."""
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")


def test_docs_page_is_current():
  r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "jax_tests_report.py"),
                      "--check"], capture_output=True, text=True)
  assert r.returncode == 0, r.stdout + r.stderr
