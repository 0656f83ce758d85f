# partix plan, as a user runs it: a training plan of GPT-2 tiny whose per-device figures add up,
# a GPT-3 175B plan on an 8x8 mesh of abstract devices (far beyond this machine), and a Llama
# generation plan, each as JSON with the documented fields.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(plan_json out_var)
  execute_process(COMMAND ${PARTIX} plan ${ARGN} --json RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 120)
  if(rc)
    message(FATAL_ERROR "partix plan ${ARGN} failed (${rc}):\n${out}\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

function(expect_positive json)
  foreach(field ${ARGN})
    string(REPLACE "." ";" path "${field}")
    string(JSON value ERROR_VARIABLE e GET "${json}" ${path})
    if(e OR NOT value GREATER 0)
      message(FATAL_ERROR "plan field ${field} should be positive, got '${value}' ${e}\n${json}")
    endif()
  endforeach()
endfunction()

# GPT-2 tiny, 4x2 with FSDP: every documented field is there and positive, and the peak holds
# at least the parameters and optimizer state the device keeps.
plan_json(tiny --model gpt2-tiny --mesh 4x2 --fsdp --batch 8 --seq 32)
expect_positive("${tiny}" total_params param_bytes per_device.params per_device.grads
                per_device.optimizer per_device.activations per_device.peak collectives.all_gather
                collectives.reduce_scatter)
string(JSON params GET "${tiny}" per_device params)
string(JSON optimizer GET "${tiny}" per_device optimizer)
string(JSON peak GET "${tiny}" per_device peak)
string(JSON param_bytes GET "${tiny}" param_bytes)
math(EXPR held "${params} + ${optimizer}")
if(NOT peak GREATER held)
  message(FATAL_ERROR "peak ${peak} does not hold parameters and optimizer state (${held})")
endif()
# FSDP over 4 data devices and 2 model devices: about an eighth of the parameters per device.
math(EXPR eighth "${param_bytes} / 8")
math(EXPR quarter "${param_bytes} / 4")
if(params LESS eighth OR params GREATER quarter)
  message(FATAL_ERROR "FSDP 4x2 keeps ${params} bytes of ${param_bytes} per device")
endif()
string(JSON n_warnings LENGTH "${tiny}" warnings)
string(JSON dup GET "${tiny}" duplicated_flops_fraction)
message(STATUS "gpt2-tiny 4x2 fsdp: peak ${peak} bytes, ${n_warnings} warnings, duplicated ${dup}")

# GPT-3 175B with 8-way tensor and 8-way data parallelism, bf16 with f32 master weights, layer
# remat: 64 abstract devices; the parameters alone are 350 GB, nothing is allocated.
plan_json(gpt3 --model gpt3-175b --mesh 8x8 --fsdp --dtype bf16 --remat layer --batch 64)
expect_positive("${gpt3}" total_params per_device.params per_device.peak collectives.all_reduce)
string(JSON total GET "${gpt3}" total_params)
if(total LESS 174000000000 OR total GREATER 176000000000)
  message(FATAL_ERROR "gpt3-175b has ${total} parameters")
endif()

# Llama generation: a prefill and a decode step, tensor parallel over 8.
plan_json(llama --model llama-7b --mesh 1x8 --generate --batch 1 --seq 128 --new-tokens 64)
expect_positive("${llama}" total_params per_device.params per_device.kv_cache per_device.decode_peak
                collectives.decode.all_reduce)
