# `partix generate --weights quantized` with --decode-loop (the quantized weights captured by a
# fori_loop over tokens) writes the text the streaming decoder writes, on 2 devices (weights
# split on block boundaries).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(args generate --devices 2 --greedy --max-tokens 8 --prompt "The capital of France is"
    --quiet --weights quantized)
foreach(mode stream loop)
  set(extra "")
  if(mode STREQUAL "loop")
    set(extra --decode-loop)
  endif()
  execute_process(COMMAND ${PARTIX} ${args} ${extra} --output ${WORK}/${mode}.txt
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "generate (${mode}) failed (${rc}):\n${out}\n${err}")
  endif()
endforeach()
file(READ ${WORK}/stream.txt stream)
file(READ ${WORK}/loop.txt loop)
if(NOT stream STREQUAL loop OR stream STREQUAL "")
  message(FATAL_ERROR "--decode-loop wrote '${loop}', streaming wrote '${stream}'")
endif()
message(STATUS "the same text: ${stream}")
