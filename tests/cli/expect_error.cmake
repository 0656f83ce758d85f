# Runs ${PARTIX} with the |-separated ARGS and expects a clean failure: exit status 1 (not a
# signal, not a CLI11 usage code), stderr matching EXPECT, and, when FORBID is given, stdout
# not matching it (e.g. "GPT-2", printed once training starts: the error came first).
string(REPLACE "|" ";" ARGS "${ARGS}")  # add_test cannot pass a ;-list through -D
execute_process(COMMAND ${PARTIX} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 60)
if(NOT rc STREQUAL "1")
  message(FATAL_ERROR "expected exit status 1, got '${rc}' from partix ${ARGS}\n${out}\n${err}")
endif()
if(NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "stderr does not match '${EXPECT}':\n${err}")
endif()
if(DEFINED FORBID AND out MATCHES "${FORBID}")
  message(FATAL_ERROR "stdout matches '${FORBID}' (the work started before the error):\n${out}")
endif()
