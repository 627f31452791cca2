# Runs one GPU check with no GPU visible and passes when it stops the agreed way: a line with
# "no CUDA device" and exit code EXIT_CODE (tests/device/no_cuda_device.h), within seconds.
#   cmake -DCOMMAND_LINE="program|arg|..." -DEXIT_CODE=77 -P expect_no_cuda_device.cmake
# ('|' separates the arguments: a ';' would be split by add_test on its way here.)
if(NOT COMMAND_LINE OR NOT DEFINED EXIT_CODE)
  message(FATAL_ERROR "usage: cmake -DCOMMAND_LINE=\"program|arg|...\" -DEXIT_CODE=N -P ${CMAKE_CURRENT_LIST_FILE}")
endif()
string(REPLACE "|" ";" command "${COMMAND_LINE}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env CUDA_VISIBLE_DEVICES= ${command}
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors TIMEOUT 110)
message("${output}${errors}")
if(NOT result STREQUAL "${EXIT_CODE}")
  message(FATAL_ERROR "${command}: exit status '${result}', expected ${EXIT_CODE} (no CUDA device)")
endif()
if(NOT "${output}${errors}" MATCHES "no CUDA device")
  message(FATAL_ERROR "${command}: exit status ${result} but no 'no CUDA device' line")
endif()
