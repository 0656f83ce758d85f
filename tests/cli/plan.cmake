# partix plan, as a user runs it: a training plan of GPT-2 tiny whose per-device figures add up,
# a GPT-3 175B plan on an 8x8 mesh of abstract devices (far beyond this machine), and a Llama
# generation plan, each as JSON with the documented fields; the KV cache by hand; --model files
# that are not config files; figures too large for int64.
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

# The KV cache holds key/value heads, not query heads (grouped-query attention), split over
# 'model' like k/v: 2 (k and v) x layers x batch x heads per device x positions x head_dim x 4.
# SmolLM2-135M: 30 layers, 3 key/value heads of 64 (9 query heads); on 1x3 one head each.
plan_json(smol --model smollm2-135m --mesh 1x3 --generate --batch 8 --seq 512 --new-tokens 128)
string(JSON kv GET "${smol}" per_device kv_cache)
math(EXPR expected "2 * 30 * 8 * (3 / 3) * (512 + 128) * 64 * 4")
if(NOT kv EQUAL expected)
  message(FATAL_ERROR "smollm2-135m 1x3: KV cache ${kv} bytes per device, by hand ${expected}")
endif()
# Llama 2 70B: 80 layers, 8 key/value heads of 128 (64 query heads); on 1x8 one head each.
plan_json(l70 --model llama-70b --mesh 1x8 --generate --batch 2 --seq 128 --new-tokens 64)
string(JSON kv GET "${l70}" per_device kv_cache)
math(EXPR expected "2 * 80 * 2 * (8 / 8) * (128 + 64) * 128 * 4")
if(NOT kv EQUAL expected)
  message(FATAL_ERROR "llama-70b 1x8: KV cache ${kv} bytes per device, by hand ${expected}")
endif()

# --model that is not a config file: a FIFO (never waited on), a device, a folder without a
# config.json, a file far larger than any config.json; each a clear error at once.
# plan_fails(<what> <stderr regex> <arguments...>)
function(plan_fails what expect)
  execute_process(COMMAND ${PARTIX} plan ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 20)
  if(NOT rc STREQUAL "1" OR NOT err MATCHES "${expect}")
    message(FATAL_ERROR "${what}: expected exit status 1 and '${expect}', got '${rc}':\n${out}\n${err}")
  endif()
endfunction()
execute_process(COMMAND mkfifo ${WORK}/fifo.json)
plan_fails("a FIFO" "is not a regular file \\(a FIFO\\)" --model ${WORK}/fifo.json)
plan_fails("a device" "is not a regular file \\(a character device\\)" --model /dev/zero)
plan_fails("a folder without a config.json" "is a folder without a config.json" --model ${WORK})
file(MAKE_DIRECTORY ${WORK}/folder_config/config.json)
plan_fails("a config.json that is a folder" "is not a regular file \\(a directory\\)"
           --model ${WORK}/folder_config)
# A model folder, as train and generate take, is planned from its config.json.
file(MAKE_DIRECTORY ${WORK}/model)
file(WRITE ${WORK}/model/config.json "{\"model_type\": \"gpt2\", \"n_embd\": 128, \"n_layer\": 3, \
\"n_head\": 4, \"vocab_size\": 1000, \"n_positions\": 64}")
plan_json(from_folder --model ${WORK}/model --mesh 2x2)
plan_json(from_file --model ${WORK}/model/config.json --mesh 2x2)
string(JSON folder_params GET "${from_folder}" total_params)
string(JSON file_params GET "${from_file}" total_params)
string(JSON folder_peak GET "${from_folder}" per_device peak)
string(JSON file_peak GET "${from_file}" per_device peak)
if(NOT folder_params EQUAL file_params OR NOT folder_peak EQUAL file_peak OR
   NOT folder_params GREATER 500000)
  message(FATAL_ERROR "plan of a model folder: ${folder_params} parameters, peak ${folder_peak}; "
                      "of its config.json: ${file_params}, peak ${file_peak}")
endif()
execute_process(COMMAND truncate -s 64M ${WORK}/huge.json)
plan_fails("a huge file" "is 67108864 bytes, more than the 16777216 accepted" --model ${WORK}/huge.json)

# Figures past int64 are an error, never wrapped: GPT-3 175B with 2^24 sequences of 2048 needs
# ~10^19 bytes per device.
plan_fails("a plan past int64" "exceed 2\\^63 bytes" --model gpt3-175b --batch 16777216 --json)
# Just below: every figure exact and ordered (no wrapped or zero activations).
plan_json(big --model gpt3-175b --batch 65536)
string(JSON act GET "${big}" per_device activations)
string(JSON peak GET "${big}" per_device peak)
string(JSON args GET "${big}" per_device arguments)
if(NOT act GREATER 1000000000000000 OR NOT peak GREATER act OR NOT peak GREATER args)
  message(FATAL_ERROR "gpt3-175b batch 65536: activations ${act}, peak ${peak}, arguments ${args}")
endif()

# Step times on this host: a table calibrated by the first mesh's measured step gives that
# mesh exactly the measured seconds and the others their modelled seconds times the same
# factor; the rates are kept in --host-rates and reused, so a plan made later with
# --calibration agrees; a mesh larger than this host can run (64 devices) has no step time.
plan_json(timed --model gpt2-tiny --mesh 2x1 --mesh 1x1 --mesh 128x1 --batch 128 --seq 32
          --calibrate 0.5 --host-rates ${WORK}/rates.json)
string(JSON first GET "${timed}" plans 0 step_time seconds)
string(JSON factor GET "${timed}" plans 0 step_time calibration)
string(JSON second GET "${timed}" plans 1 step_time seconds)
string(JSON second_model GET "${timed}" plans 1 step_time modelled_seconds)
string(JSON big_step TYPE "${timed}" plans 2 step_time)
if(NOT EXISTS ${WORK}/rates.json OR NOT big_step STREQUAL "NULL")
  message(FATAL_ERROR "step times: rates file kept? large mesh timed as '${big_step}'\n${timed}")
endif()
foreach(part compute memory per_instruction collectives)
  expect_positive("${timed}" plans.0.step_time.${part})
endforeach()
expect_positive("${timed}" plans.1.step_time.seconds plans.1.step_time.compute)
# CMake's math is integer only: python compares.
execute_process(COMMAND python3 -c "import sys; f, k, s, m = map(float, sys.argv[1:]); \
sys.exit(0 if abs(f - 0.5) < 1e-9 and abs(s - k * m) < 1e-9 * s else 1)"
                ${first} ${factor} ${second} ${second_model} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "calibrated: first ${first} (want 0.5), second ${second} = ${factor} x ${second_model}?")
endif()
plan_json(again --model gpt2-tiny --mesh 1x1 --batch 128 --seq 32 --calibration ${factor}
          --host-rates ${WORK}/rates.json)
string(JSON again_s GET "${again}" step_time seconds)
execute_process(COMMAND python3 -c "import sys; a, b = map(float, sys.argv[1:]); \
sys.exit(0 if abs(a - b) < 1e-9 * b else 1)" ${again_s} ${second} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the same rates and factor, made apart: ${again_s} s against ${second} s")
endif()
plan_fails("both calibrations" "give --calibrate .a measured step. or --calibration .a factor., not both"
           --model gpt2-tiny --calibrate 1 --calibration 2)
plan_fails("step times of generation" "--step-time and --calibrate time training steps, not --generate"
           --model smollm2-135m --generate --step-time)
file(WRITE ${WORK}/bad_rates.json "{\"1\": {\"cores\": 2}}")
plan_fails("malformed rates" "--host-rates '.*bad_rates.json': the rates of 1 device.s. are malformed"
           --model gpt2-tiny --host-rates ${WORK}/bad_rates.json)
file(WRITE ${WORK}/neg_rates.json "{\"1\": {\"cores\": 2, \"flops_per_s\": -1, \"bytes_per_s\": 1, \
\"seconds_per_instruction\": 1, \"seconds_per_collective\": 0, \"sent_bytes_per_s\": {}}}")
plan_fails("negative rates" "the rates of 1 device.s. must all be positive"
           --model gpt2-tiny --host-rates ${WORK}/neg_rates.json)

# One name, one model: the text plan of `small` says which vocabulary it planned, and that
# partix train's small reads bytes; --vocab 256 plans that run (and needs no note).
foreach(vocab 0 256)
  execute_process(COMMAND ${PARTIX} plan --model small --mesh 1x1 --batch 1 --seq 16
                          --vocab ${vocab}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(rc)
    message(FATAL_ERROR "partix plan --model small --vocab ${vocab} failed (${rc}):\n${out}\n${err}")
  endif()
  if(vocab EQUAL 0)
    set(want "vocabulary 50257")
  else()
    set(want "vocabulary 256")
  endif()
  string(FIND "${out}" "${want}" at)
  string(FIND "${out}" "partix train --model small reads bytes" note)
  if(at EQUAL -1 OR (vocab EQUAL 0 AND note EQUAL -1) OR (vocab EQUAL 256 AND NOT note EQUAL -1))
    message(FATAL_ERROR "partix plan --model small --vocab ${vocab} should say '${want}' "
                        "(and the byte-vocabulary note only for the model's own):\n${out}")
  endif()
endforeach()
