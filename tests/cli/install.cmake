# Installs partix into a temporary prefix, builds examples/installed (the GPT-2 FSDP training
# loop and the Llama tensor-parallel generation) against it with find_package(partix), and
# runs both.
file(REMOVE_RECURSE ${WORK})
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
  message("${what}: ok")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
run("install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix)
run("configure against the install" ${CMAKE_COMMAND} -S ${SOURCE}/examples/installed
    -B ${WORK}/build -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_BUILD_TYPE=Release)
run("build" ${CMAKE_COMMAND} --build ${WORK}/build -j 2)
run("gpt2_fsdp_train" ${WORK}/build/gpt2_fsdp_train)
message("${last_output}")
run("llama_tp_generate" ${WORK}/build/llama_tp_generate)
message("${last_output}")
