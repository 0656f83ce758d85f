# partix train --checkpoint-dir: a run saved at step 10 on 4x2 and resumed on 2x4 logs the
# losses of the uninterrupted run; a folder holding checkpoints is not overwritten without
# --resume; a full disk fails the run with the previous step intact; --keep prunes old steps.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(D ${WORK}/ckpt)

function(expect_failure what expect)
  if(NOT rc STREQUAL "1" OR NOT err MATCHES "${expect}")
    message(FATAL_ERROR "${what}: expected exit status 1 and '${expect}', got ${rc}:\n${out}\n${err}")
  endif()
  if(out MATCHES "GPT-2")
    message(FATAL_ERROR "${what}: training started before the error:\n${out}")
  endif()
endfunction()

# Losses as integers of 1e-6 ("4.861989" -> 4861989), by step, from a metrics CSV.
function(read_losses csv prefix)
  file(STRINGS ${csv} lines)
  list(POP_FRONT lines)
  foreach(line ${lines})
    string(REPLACE "," ";" f "${line}")
    list(GET f 0 step)
    list(GET f 1 loss)
    string(REPLACE "." "" micro "${loss}")
    string(REGEX REPLACE "^0+([0-9])" "\\1" micro "${micro}")
    set(${prefix}_${step} ${micro} PARENT_SCOPE)
  endforeach()
endfunction()

# The uninterrupted run, saving at steps 10 and 20.
execute_process(COMMAND ${PARTIX} train --model tiny --mesh 4x2 --steps 20 --save-every 10
                        --checkpoint-dir ${D} --metrics ${WORK}/full.csv --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc OR NOT out MATCHES "checkpoints in .*ckpt: steps 10, 20")
  message(FATAL_ERROR "the saving run failed (${rc}):\n${out}\n${err}")
endif()
foreach(f index.json data-00000-of-00001.safetensors)
  if(NOT EXISTS ${D}/step_10/${f})
    message(FATAL_ERROR "step_10 lacks ${f}")
  endif()
endforeach()

# A folder with checkpoints is refused without --resume, and --steps before its latest step.
execute_process(COMMAND ${PARTIX} train --model tiny --steps 30 --checkpoint-dir ${D} --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
expect_failure("--checkpoint-dir without --resume" "holds checkpoints up to step 20; pass --resume")
execute_process(COMMAND ${PARTIX} train --model tiny --steps 15 --resume --checkpoint-dir ${D} --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
expect_failure("--steps before the checkpoint" "--steps 15 is before the step 20")
# Another model or another batch is refused by the checkpoint's metadata.
execute_process(COMMAND ${PARTIX} train --model tiny --batch 16 --steps 30 --resume --checkpoint-dir ${D}
                        --quiet RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "1" OR NOT err MATCHES "resume with the same --batch, --seq, --seed and --corpus")
  message(FATAL_ERROR "another batch should be refused (${rc}):\n${out}\n${err}")
endif()

# As if the run had died after step 10: resume on another mesh.
file(REMOVE_RECURSE ${D}/step_20)
execute_process(COMMAND ${PARTIX} train --model tiny --mesh 2x4 --steps 20 --resume
                        --checkpoint-dir ${D} --metrics ${WORK}/resumed.csv --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc OR NOT out MATCHES "resumed from .*step_10 \\(step 10 of 20\\)")
  message(FATAL_ERROR "the resumed run failed (${rc}):\n${out}\n${err}")
endif()
read_losses(${WORK}/full.csv full)
read_losses(${WORK}/resumed.csv resumed)
if(DEFINED resumed_9 OR NOT DEFINED resumed_10 OR NOT DEFINED resumed_19)
  message(FATAL_ERROR "the resumed run should log steps 10 to 19")
endif()
foreach(s RANGE 10 19)
  # Within 1e-5 relative (summation order differs between meshes; dropout is on).
  math(EXPR diff "${full_${s}} - ${resumed_${s}}")
  if(diff LESS 0)
    math(EXPR diff "-${diff}")
  endif()
  math(EXPR scaled "${diff} * 100000")
  if(scaled GREATER ${full_${s}})
    message(FATAL_ERROR "step ${s}: loss ${resumed_${s}} after resuming, ${full_${s}} uninterrupted (1e-6 units)")
  endif()
endforeach()

# A full disk (a file-size limit): the run fails naming the step, the previous steps stay whole.
file(SHA256 ${D}/step_20/data-00000-of-00001.safetensors before)
execute_process(COMMAND sh -c "ulimit -f 64 && exec \"$0\" train --model tiny --mesh 4x2 --steps 23 --save-every 1 --resume --checkpoint-dir \"$1\" --quiet"
                        ${PARTIX} ${D}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "1" OR NOT err MATCHES "cannot write step 21 to '.*step_21' \\(earlier steps are unchanged\\).*File too large")
  message(FATAL_ERROR "a full disk should fail the run (${rc}):\n${out}\n${err}")
endif()
file(SHA256 ${D}/step_20/data-00000-of-00001.safetensors after)
if(NOT before STREQUAL after)
  message(FATAL_ERROR "the failed save changed step_20")
endif()
file(GLOB leftovers LIST_DIRECTORIES true ${D}/*)
if(NOT leftovers STREQUAL "${D}/.partix-lock;${D}/step_10;${D}/step_20")
  message(FATAL_ERROR "after the failed save the folder holds: ${leftovers}")
endif()

# --keep 2: only the newest two steps stay.
execute_process(COMMAND ${PARTIX} train --model tiny --steps 5 --save-every 1 --keep 2
                        --checkpoint-dir ${WORK}/kept --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc OR NOT out MATCHES "checkpoints in .*kept: steps 4, 5\n")
  message(FATAL_ERROR "--keep 2 should leave steps 4 and 5 (${rc}):\n${out}\n${err}")
endif()

# A flipped byte of a parameter's data: resuming on a mesh where each device reads part of the
# chunk fails the checksum instead of training on from the corrupt weight.
execute_process(COMMAND ${PARTIX} train --model tiny --mesh 1x1 --steps 2 --save-every 2
                        --checkpoint-dir ${WORK}/corrupt --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "the run to corrupt failed (${rc}):\n${out}\n${err}")
endif()
file(READ ${WORK}/corrupt/step_2/index.json index)
string(JSON leaves LENGTH "${index}" leaves)
math(EXPR last "${leaves} - 1")
set(offset "")
foreach(i RANGE ${last})
  string(JSON name GET "${index}" leaves ${i} name)
  if(name MATCHES "^\\['params'\\].*c_fc\\.weight")
    string(JSON begin GET "${index}" leaves ${i} chunks 0 byte_range 0)
    string(JSON end GET "${index}" leaves ${i} chunks 0 byte_range 1)
    math(EXPR offset "(${begin} + ${end}) / 2")
  endif()
endforeach()
if(offset STREQUAL "")
  message(FATAL_ERROR "no c_fc.weight leaf in the index")
endif()
set(data ${WORK}/corrupt/step_2/data-00000-of-00001.safetensors)
execute_process(COMMAND sh -c "b=$(od -An -tu1 -j $1 -N1 \"$0\") && printf \"$(printf '\\\\%03o' $((b ^ 16)))\" | dd of=\"$0\" bs=1 seek=$1 conv=notrunc 2>/dev/null"
                        ${data} ${offset} RESULT_VARIABLE rc)
file(SHA256 ${data} corrupted)
execute_process(COMMAND ${PARTIX} train --model tiny --mesh 1x2 --steps 4 --resume
                        --checkpoint-dir ${WORK}/corrupt --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "1" OR NOT err MATCHES "c_fc\\.weight.*fails its checksum.*the file is corrupted")
  message(FATAL_ERROR "resuming from a corrupt weight should fail (${rc}):\n${out}\n${err}")
endif()
if(EXISTS ${WORK}/corrupt/step_4)
  message(FATAL_ERROR "the run on a corrupt checkpoint saved a step")
endif()

# A diverging run stops at the first non-finite loss (or parameters), naming the step, and
# keeps the good step: with --keep 1 nothing replaces it.
execute_process(COMMAND ${PARTIX} train --model tiny --steps 4 --save-every 2 --keep 1
                        --checkpoint-dir ${WORK}/diverge --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(SHA256 ${WORK}/diverge/step_4/data-00000-of-00001.safetensors good)
execute_process(COMMAND ${PARTIX} train --model tiny --steps 10 --save-every 1 --keep 1 --lr 1e30
                        --warmup 0 --resume --checkpoint-dir ${WORK}/diverge --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "1" OR NOT err MATCHES "\\[train\\] step [0-9]+: .*training diverged")
  message(FATAL_ERROR "a diverging run should stop with an error (${rc}):\n${out}\n${err}")
endif()
message("the diverging run: ${err}")
file(GLOB steps LIST_DIRECTORIES true ${WORK}/diverge/step_*)
file(SHA256 ${WORK}/diverge/step_4/data-00000-of-00001.safetensors after)
if(NOT steps STREQUAL "${WORK}/diverge/step_4" OR NOT good STREQUAL after)
  message(FATAL_ERROR "the diverging run replaced the good step: ${steps}")
endif()

# Another corpus of the same size is another data stream: the resume is refused.
file(WRITE ${WORK}/a.txt "the quick brown fox jumps over the lazy dog, again and again. ")
file(WRITE ${WORK}/b.txt "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG, AGAIN AND AGAIN. ")
foreach(i RANGE 5)
  file(APPEND ${WORK}/a.txt "the quick brown fox jumps over the lazy dog, again and again. ")
  file(APPEND ${WORK}/b.txt "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG, AGAIN AND AGAIN. ")
endforeach()
execute_process(COMMAND ${PARTIX} train --model tiny --steps 2 --seq 16 --batch 2 --corpus ${WORK}/a.txt
                        --checkpoint-dir ${WORK}/corpus --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "the run on a.txt failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${PARTIX} train --model tiny --steps 4 --seq 16 --batch 2 --corpus ${WORK}/b.txt
                        --resume --checkpoint-dir ${WORK}/corpus --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "1" OR NOT err MATCHES "resume with the same --batch, --seq, --seed and --corpus")
  message(FATAL_ERROR "another corpus of the same size should be refused (${rc}):\n${out}\n${err}")
endif()

# Two runs on one folder: the second is refused while the first holds it.
execute_process(COMMAND sh -c "\"$0\" train --model tiny --steps 400 --save-every 1 --checkpoint-dir \"$1\" --quiet >/dev/null 2>&1 & pid=$!; while [ ! -e \"$1/step_1\" ]; do sleep 0.1; kill -0 $pid 2>/dev/null || exit 3; done; \"$0\" train --model tiny --steps 400 --resume --checkpoint-dir \"$1\" --quiet; rc=$?; kill $pid; wait $pid; exit $rc"
                        ${PARTIX} ${WORK}/shared
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "1" OR NOT err MATCHES "is in use by another run")
  message(FATAL_ERROR "a second run on one folder should be refused (${rc}):\n${out}\n${err}")
endif()
