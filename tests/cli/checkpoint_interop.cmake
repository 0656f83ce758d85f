# A checkpoint `partix train` wrote (mesh 4x2, FSDP-sharded parameters and AdamW state) opened
# by Hugging Face's safetensors reader: every data file, every chunk's dtype, shape, byte range
# and checksum (tools/golden/checkpoint_safetensors.py). Skipped when no Python with the
# safetensors package is found ($PARTIX_PYTHON, the virtual environment scripts/setup.sh makes,
# the repository's .venv-jax, python3).
set(cache "$ENV{PARTIX_CACHE}")
if(cache STREQUAL "")
  set(cache "$ENV{HOME}/.cache/partix")
endif()
set(candidates "$ENV{PARTIX_PYTHON}" "${cache}/tools-venv/bin/python" "${SOURCE}/.venv-jax/bin/python"
               python3)
set(python "")
foreach(p ${candidates})
  if(p STREQUAL "")
    continue()
  endif()
  execute_process(COMMAND ${p} -c "import numpy, safetensors" RESULT_VARIABLE rc
                  OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    set(python ${p})
    break()
  endif()
endforeach()
if(python STREQUAL "")
  message("SKIPPED: no Python with numpy and safetensors (set PARTIX_PYTHON)")
  return()
endif()
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${PARTIX} train --model tiny --mesh 4x2 --fsdp --steps 2 --batch 8
                        --seq 32 --save-every 2 --checkpoint-dir ${WORK} --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "partix train failed:\n${out}")
endif()
execute_process(COMMAND ${python} ${SOURCE}/tools/golden/checkpoint_safetensors.py ${WORK}/step_2
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "safetensors disagrees with the checkpoint")
endif()
