"""Runs a Python program as a two-process MPI job for the tests (helper module, not a test)."""
import os
import shutil
import subprocess
import sys

import pytest

needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")


def run_two_processes(tmp_path, program, devices_each=2, timeout=120):
  """Writes `program` to tmp_path/prog.py and runs it under `mpirun -np 2` with
  PARTIX_NUM_CPU_DEVICES=devices_each and tmp_path as its argument; returns the
  CompletedProcess (stdout and stderr captured)."""
  prog = tmp_path / "prog.py"
  prog.write_text(program)
  env = dict(os.environ, PARTIX_NUM_CPU_DEVICES=str(devices_each), OMPI_ALLOW_RUN_AS_ROOT="1",
             OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
  return subprocess.run(["mpirun", "-np", "2", "-x", "PYTHONPATH", "-x", "PARTIX_NUM_CPU_DEVICES",
                         sys.executable, str(prog), str(tmp_path)], env=env,
                        capture_output=True, text=True, timeout=timeout)
