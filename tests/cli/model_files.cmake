# `partix generate` against hostile model files: mutated copies of the real SmolLM2 GGUF
# (written by partix_gguf_mutate), a FIFO and a device. Every case exits with status 1 and a
# message naming the problem: no SIGFPE, no hang, no empty text.
include(${CMAKE_CURRENT_LIST_DIR}/smollm2_model.cmake)
if(model STREQUAL "")
  return()
endif()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# mutate(<name> <operations...>): ${WORK}/<name>.gguf from the real file.
function(mutate name)
  execute_process(COMMAND ${MUTATE} ${model} ${WORK}/${name}.gguf ${ARGN} RESULT_VARIABLE rc
                  ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "partix_gguf_mutate ${ARGN} failed: ${err}")
  endif()
endfunction()

# generate_fails(<what> <stderr regex> <arguments...>)
function(generate_fails what expect)
  execute_process(COMMAND ${PARTIX} generate --devices 2 --max-tokens 2 --quiet ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc STREQUAL "1" OR NOT err MATCHES "${expect}")
    message(FATAL_ERROR "${what}: expected exit status 1 and '${expect}', got '${rc}':\n${out}\n${err}")
  endif()
endfunction()

execute_process(COMMAND mkfifo ${WORK}/fifo.gguf)
generate_fails("a FIFO" "is not a regular file \\(a FIFO\\)" --model ${WORK}/fifo.gguf)
generate_fails("a device" "is not a regular file \\(a character device\\)" --model /dev/zero)
generate_fails("a folder without config.json" "has no config.json" --model ${WORK})

mutate(heads0 --layers 1 --set-u32 llama.attention.head_count=0)
generate_fails("head_count 0" "llama.attention.head_count is 0" --model ${WORK}/heads0.gguf)
mutate(kv0 --layers 1 --set-u32 llama.attention.head_count_kv=0)
generate_fails("head_count_kv 0" "llama.attention.head_count_kv is 0" --model ${WORK}/kv0.gguf)
mutate(blocks --layers 1 --set-u32 llama.block_count=4294967295)
generate_fails("block_count 2^32-1" "llama.block_count is 4294967295, must be in .1, 1024." --model ${WORK}/blocks.gguf)
mutate(eps --layers 1 --set-f32 llama.attention.layer_norm_rms_epsilon=nan)
generate_fails("rms eps NaN" "layer_norm_rms_epsilon is nan" --model ${WORK}/eps.gguf)

# NaN weights: an error naming the step, and with --debug-nans the first layer it reaches.
mutate(nan --layers 1 --fill-f32 blk.0.ffn_norm.weight=nan)
generate_fails("NaN logits" "step 0 \\(prefill\\): 49152 of the 49152 logits of prompt 0 are NaN or infinite.*--debug-nans"
               --model ${WORK}/nan.gguf)
generate_fails("NaN logits, debugged" "they first appear in the output of model.layers.0"
               --model ${WORK}/nan.gguf --debug-nans)

# A healthy one-layer copy generates; its outputs to a full device fail loudly.
mutate(one --layers 1)
generate_fails("--output /dev/full" "cannot write '/dev/full' \\(write failed\\): No space left on device"
               --model ${WORK}/one.gguf --output /dev/full)
generate_fails("--trace /dev/full" "\\[profiler\\] cannot write '/dev/full'" --model ${WORK}/one.gguf
               --trace /dev/full)
execute_process(COMMAND ${PARTIX} generate --devices 2 --max-tokens 2 --quiet --model ${WORK}/one.gguf
                        --output ${WORK}/out.txt
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(rc OR NOT EXISTS ${WORK}/out.txt)
  message(FATAL_ERROR "the one-layer copy should generate (${rc}):\n${out}\n${err}")
endif()

# Host memory exhausted while loading (a 200 MB address-space limit): a message and exit
# status 1, not an escaped std::bad_alloc and a core dump.
execute_process(COMMAND sh -c "ulimit -v 200000 && exec \"$0\" generate --max-tokens 2 --quiet --model \"$1\""
                        ${PARTIX} ${model}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc STREQUAL "1" OR NOT err MATCHES "out of (host )?memory")
  message(FATAL_ERROR "out of memory: expected exit status 1 and a message, got '${rc}':\n${out}\n${err}")
endif()
