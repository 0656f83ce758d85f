# Writers and a full disk, as a user meets them: rc 1 with the path named, never rc 0 with a
# truncated file; a checkpoint is replaced whole or not at all.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(expect_failure what expect)
  if(NOT rc STREQUAL "1" OR NOT err MATCHES "${expect}")
    message(FATAL_ERROR "${what}: expected exit status 1 and '${expect}', got ${rc}:\n${out}\n${err}")
  endif()
endfunction()

# Metrics to a full device: the first row's write fails.
execute_process(COMMAND ${PARTIX} train --steps 3 --quiet --metrics /dev/full
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
expect_failure("--metrics /dev/full" "cannot write '/dev/full' \\(write failed\\): No space left on device")

# A checkpoint, then a second save past a file-size limit (a full disk): the first survives.
execute_process(COMMAND ${PARTIX} train --steps 2 --quiet --save ${WORK}/ckpt
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "the first save failed (${rc}):\n${out}\n${err}")
endif()
file(SHA256 ${WORK}/ckpt/config.json config_before)
file(SHA256 ${WORK}/ckpt/model.safetensors weights_before)
execute_process(COMMAND sh -c "ulimit -f 64 && exec \"$0\" train --steps 2 --seed 7 --quiet --save \"$1\""
                        ${PARTIX} ${WORK}/ckpt
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
expect_failure("--save past a file-size limit" "cannot write the checkpoint '.*ckpt' \\(it is unchanged\\).*File too large")
file(SHA256 ${WORK}/ckpt/config.json config_after)
file(SHA256 ${WORK}/ckpt/model.safetensors weights_after)
if(NOT config_after STREQUAL config_before OR NOT weights_after STREQUAL weights_before)
  message(FATAL_ERROR "the failed save changed the previous checkpoint")
endif()
file(GLOB leftovers ${WORK}/*.tmp-*)
if(leftovers)
  message(FATAL_ERROR "temporaries left behind: ${leftovers}")
endif()

# A --save folder holding other files is refused before training, and left as it was.
file(MAKE_DIRECTORY ${WORK}/home)
file(WRITE ${WORK}/home/notes.txt "precious")
execute_process(COMMAND ${PARTIX} train --steps 2 --quiet --save ${WORK}/home
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
expect_failure("--save over unrelated files" "holding 'notes.txt'.*refusing to replace it")
if(out MATCHES "GPT-2")
  message(FATAL_ERROR "training started before --save was refused:\n${out}")
endif()
file(READ ${WORK}/home/notes.txt notes)
if(NOT notes STREQUAL "precious")
  message(FATAL_ERROR "notes.txt changed")
endif()
