# Links every entry of the package's source folder SRC into DST (the build tree's package), so
# edits to the Python files need no rebuild; new files appear at the next build.
file(MAKE_DIRECTORY ${DST})
file(GLOB entries RELATIVE ${SRC} ${SRC}/*)
foreach(e ${entries})
  if(e STREQUAL "__pycache__")
    continue()
  endif()
  if(NOT EXISTS ${DST}/${e})
    file(CREATE_LINK ${SRC}/${e} ${DST}/${e} SYMBOLIC)
  endif()
endforeach()
