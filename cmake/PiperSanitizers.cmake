# Sanitizer and fuzzing builds (tools/sanitize.sh, tools/fuzz.sh), each in its own build folder.
#
# PIPER_SANITIZE (e.g. "address,undefined") instruments every C++ target with those
# sanitizers; any report aborts the process (-fno-sanitize-recover=all), so a test that
# triggers one fails. PIPER_FUZZ=ON (clang only) adds libFuzzer's coverage instrumentation
# and builds the fuzz targets of tests/fuzz.
set(PIPER_SANITIZE "" CACHE STRING "Sanitizers to build with, as -fsanitize= takes them (e.g. address,undefined)")
option(PIPER_FUZZ "Build the libFuzzer targets of tests/fuzz (clang only)" OFF)

if(PIPER_FUZZ AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "PIPER_FUZZ=ON needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}; "
                      "configure with -DCMAKE_CXX_COMPILER=clang++")
endif()
if(PIPER_SANITIZE)
  # Frame pointers give whole stacks in reports at little cost.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${PIPER_SANITIZE};-fno-sanitize-recover=all;-fno-omit-frame-pointer>")
  add_link_options("-fsanitize=${PIPER_SANITIZE}")
endif()
if(PIPER_FUZZ)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>")
endif()
