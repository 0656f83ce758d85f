# partix generate with the real SmolLM2 GGUF (skipped when it is not cached): tiny temperatures
# give the greedy text (logits / T once overflowed to inf and sampled nothing), and device
# counts whose weights cannot fit are refused before anything loads.
include(${CMAKE_CURRENT_LIST_DIR}/smollm2_model.cmake)
if(model STREQUAL "")
  return()
endif()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# generate_text(<out var> <arguments...>): the text written to --output.
function(generate_text out_var)
  execute_process(COMMAND ${PARTIX} generate --model ${model} --devices 2 --max-tokens 8 --quiet
                          --prompt "The capital of France is" --output ${WORK}/out.txt ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(rc)
    message(FATAL_ERROR "partix generate ${ARGN} failed (${rc}):\n${out}\n${err}")
  endif()
  file(READ ${WORK}/out.txt text)
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

generate_text(greedy --greedy)
string(STRIP "${greedy}" stripped)
if(stripped STREQUAL "")
  message(FATAL_ERROR "the greedy text is empty")
endif()
foreach(args "--temperature;1e-300" "--temperature;1e-40;--decode-loop"
             "--temperature;1e-300;--top-k;5;--top-p;0.5")
  generate_text(text ${args})
  if(NOT text STREQUAL greedy)
    message(FATAL_ERROR "generate ${args} wrote '${text}', greedy wrote '${greedy}'")
  endif()
endforeach()

# generate_fails(<what> <stderr regex> <arguments...>): exit status 1, nothing generated.
function(generate_fails what expect)
  execute_process(COMMAND ${PARTIX} generate --model ${model} --max-tokens 2 --greedy
                          --prompt Hi ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc STREQUAL "1" OR NOT err MATCHES "${expect}" OR out MATCHES "prefill:")
    message(FATAL_ERROR "${what}: expected exit status 1 and '${expect}', got '${rc}':\n${out}\n${err}")
  endif()
endfunction()

# A device holds a block of every split weight: past 3 devices (SmolLM2's key/value heads) a
# device keeps about 34 MiB whatever the count, so 4096 devices need ~136 GiB, refused up front
# where that much is not available (it once ran 78 s into an OOM kill).
file(STRINGS /proc/meminfo available REGEX "^MemAvailable:")
string(REGEX MATCH "[0-9]+" available_kib "${available}")
if(available_kib AND available_kib LESS 120000000)
  generate_fails("4096 devices" "out of host memory: the weights of .* on 4096 devices need .* per device: each holds a block of every split weight.* available; use fewer devices"
                 --devices 4096)
else()
  message(STATUS "more than 120 GB available: 4096 devices would fit, not tried")
endif()
# A per-device limit: the weights each device would hold are checked against it first.
set(ENV{PARTIX_DEVICE_MEMORY_BYTES} 10000000)
generate_fails("a device memory limit" "each device would hold .* of the weights, more than its 9.5 MiB limit"
               --devices 4)
unset(ENV{PARTIX_DEVICE_MEMORY_BYTES})
