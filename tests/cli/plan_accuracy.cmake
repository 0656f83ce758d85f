# partix plan against partix train: for GPT-2 tiny on 8 devices as data, tensor and FSDP
# parallel meshes and pipelines over a stage axis (gpipe and 1f1b, with FSDP too), with and without layer remat,
# the plan's peak per
# device is within 5% of the peak that training measures (memory_stats, printed by train).
# partix train's tiny reads bytes as plan's tiny does (vocabulary 256 in both).
set(configs
  "1x1" "8x1" "4x2" "2x4" "1x8" "4x2|--fsdp" "8x1|--fsdp" "4x2|--remat" "2x4|--fsdp|--remat"
  "stage=2,data=2,model=2|--microbatches|4|--schedule|1f1b" "stage=2,data=2,model=2|--microbatches|4|--schedule|gpipe"
  "stage=2,data=4|--microbatches|2" "stage=2,data=1|--microbatches|8|--schedule|gpipe" "stage=2,model=4|--microbatches|4|--remat"
  "stage=2,data=4|--microbatches|2|--fsdp" "stage=2,data=2,model=2|--microbatches|2|--fsdp|--remat")
# (tiny's 2 layers split over 2 stages at most and cannot interleave: bench/pipeline_bench.cpp
# compares the deeper and interleaved plans.)
# "4.63 MiB" -> bytes (integer arithmetic: the printed figure has at most 3 decimals).
function(to_bytes text out_var)
  if(NOT text MATCHES "^([0-9]+)(\\.([0-9]+))? (B|KiB|MiB|GiB)$")
    message(FATAL_ERROR "cannot read the size '${text}'")
  endif()
  set(int ${CMAKE_MATCH_1})
  set(frac "${CMAKE_MATCH_3}")
  set(unit ${CMAKE_MATCH_4})
  string(LENGTH "${frac}" places)
  set(scale 1)
  foreach(i RANGE 1 ${places})
    if(places GREATER 0)
      math(EXPR scale "${scale} * 10")
    endif()
  endforeach()
  if(places EQUAL 0)
    set(frac 0)
  endif()
  set(mult 1)
  if(unit STREQUAL "KiB")
    set(mult 1024)
  elseif(unit STREQUAL "MiB")
    set(mult 1048576)
  elseif(unit STREQUAL "GiB")
    set(mult 1073741824)
  endif()
  math(EXPR bytes "(${int} * ${scale} + ${frac}) * ${mult} / ${scale}")
  set(${out_var} ${bytes} PARENT_SCOPE)
endfunction()

foreach(config ${configs})
  string(REPLACE "|" ";" parts "${config}")
  list(POP_FRONT parts mesh)
  set(plan_flags ${parts})
  list(TRANSFORM plan_flags REPLACE "^--remat$" "--remat;layer")
  execute_process(COMMAND ${PARTIX} plan --model tiny --mesh ${mesh} --batch 8 --seq 64 ${plan_flags} --json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE plan ERROR_VARIABLE err TIMEOUT 120)
  if(rc)
    message(FATAL_ERROR "partix plan ${config} failed (${rc}):\n${plan}\n${err}")
  endif()
  string(JSON planned GET "${plan}" per_device peak)
  execute_process(COMMAND ${PARTIX} train --model tiny --mesh ${mesh} --batch 8 --seq 64 --steps 2
                          --quiet ${parts}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
  if(rc OR NOT out MATCHES "peak memory per device:([^\n]*)")
    message(FATAL_ERROR "partix train ${config} failed (${rc}):\n${out}\n${err}")
  endif()
  # The fullest device.
  string(REGEX MATCHALL "[0-9]+:[0-9.]+ [KMG]?i?B" entries "${CMAKE_MATCH_1}")
  set(measured 0)
  foreach(entry ${entries})
    string(REGEX REPLACE "^[0-9]+:" "" size "${entry}")
    to_bytes("${size}" bytes)
    if(bytes GREATER measured)
      set(measured ${bytes})
    endif()
  endforeach()
  if(measured EQUAL 0)
    message(FATAL_ERROR "partix train ${config}: no peak memory in\n${out}")
  endif()
  # |planned - measured| <= 5% of measured
  math(EXPR diff "${planned} - ${measured}")
  if(diff LESS 0)
    math(EXPR diff "-(${diff})")
  endif()
  math(EXPR permille "${diff} * 1000 / ${measured}")
  message(STATUS "${config}: planned ${planned} bytes, measured ${measured} (${permille} per mille off)")
  if(permille GREATER 50)
    message(FATAL_ERROR "partix plan ${config} predicts a peak of ${planned} bytes per device; "
                        "partix train measures ${measured}")
  endif()
endforeach()
