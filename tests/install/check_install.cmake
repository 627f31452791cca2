# Installs the build into a fresh prefix, builds the consumer against it and runs it.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
foreach(path bin/moescope lib/libmoescope_recorder.so include/moescope/recorder.h
             lib/cmake/moescope/moescopeConfig.cmake share/moescope/python/moescope/__init__.py
             share/moescope/python/moescope/_install_layout.py)
  if(NOT EXISTS ${WORK_DIR}/prefix/${path})
    message(FATAL_ERROR "not installed: ${path}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/consumer
                -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${WORK_DIR}/consumer/consumer ${WORK_DIR}/consumer.moetrace
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer failed (${rc})")
endif()

# The installed Python module: it finds the installed shim by itself, and `moescope record`
# from the prefix puts it on PYTHONPATH, so `import moescope` records with nothing set up.
if(NOT PYTHON3)  # the build's interpreter (tests/install/CMakeLists.txt passes it)
  find_program(PYTHON3 python3)
endif()
if(NOT PYTHON3)
  message(FATAL_ERROR "python3 not found: cannot check the installed Python module")
endif()
set(prefix ${WORK_DIR}/prefix)
execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${prefix}/share/moescope/python
                ${PYTHON3} -c "import moescope; print(moescope._library._name)"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                OUTPUT_STRIP_TRAILING_WHITESPACE)
file(REAL_PATH "${out}" loaded_library)
file(REAL_PATH ${prefix}/lib/libmoescope_inject.so installed_shim)
if(NOT rc EQUAL 0 OR NOT loaded_library STREQUAL installed_shim)
  message(FATAL_ERROR "the installed module did not load the installed shim "
                      "(${installed_shim}): '${out}' ${err}")
endif()
string(CONCAT script "import moescope\nassert moescope.recording()\nmoescope.step(0)\n"
       "moescope.expert_load(0, [5, 6, 7])\nprint('python annotations', moescope.__file__)\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH
                ${prefix}/bin/moescope record -o ${WORK_DIR}/python.moetrace --no-cuda --
                ${PYTHON3} -c "${script}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${out}" "python annotations ${prefix}/share/moescope/python/" found)
if(NOT rc EQUAL 0 OR found EQUAL -1)
  message(FATAL_ERROR "moescope record with the installed module failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${prefix}/bin/moescope info --json ${WORK_DIR}/python.moetrace
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "moescope info failed (${rc}):\n${err}")
endif()
string(JSON expert_loads ERROR_VARIABLE json_error GET "${out}" 0 events_per_kind expert_load)
string(JSON steps ERROR_VARIABLE json_error GET "${out}" 0 events_per_kind step)
if(NOT expert_loads EQUAL 1 OR NOT steps EQUAL 1)
  message(FATAL_ERROR "the installed module's events are not in the trace:\n${out}")
endif()
message("python module: expert_load=${expert_loads} step=${steps}")
# Passed: the install and the consumer's build go (hundreds of MB; CI's disk is small). A
# failure above stops before this and keeps them to be read.
file(REMOVE_RECURSE ${WORK_DIR})
