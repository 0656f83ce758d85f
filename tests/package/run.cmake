# Configures, builds and runs the consumer project against a partix package.
# -DINSTALL_FROM=<build dir>: install partix into WORK/prefix first and use that.
file(REMOVE_RECURSE ${WORK})
if(INSTALL_FROM)
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${INSTALL_FROM} --prefix ${WORK}/prefix
                  RESULT_VARIABLE rc OUTPUT_QUIET)
  if(rc)
    message(FATAL_ERROR "install failed: ${rc}")
  endif()
  set(partix_DIR ${WORK}/prefix/lib/cmake/partix)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/build -Dpartix_DIR=${partix_DIR}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configure failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "build failed: ${rc}")
endif()
execute_process(COMMAND ${WORK}/build/consumer RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "consumer failed: ${rc}")
endif()
