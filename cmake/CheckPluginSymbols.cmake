# ctest script: every Piper symbol the CUDA plugin leaves undefined is exported by LOADER, an
# executable that loads it (piper_loads_cuda_plugin). A missing one makes --device cuda fail
# at load time with "undefined symbol", which no machine without a GPU would otherwise see.
#
#   cmake -DNM=nm -DPLUGIN=libpiper_cuda.so -DLOADER=piper-run -P CheckPluginSymbols.cmake
function(piper_symbols file options out)
  execute_process(COMMAND ${NM} -D ${options} ${file} OUTPUT_VARIABLE listing
                  RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${NM} -D ${options} ${file} failed (${status})")
  endif()
  string(REGEX MATCHALL "_Z[A-Za-z0-9_]*5piper[A-Za-z0-9_]*" symbols "${listing}")
  set(${out} ${symbols} PARENT_SCOPE)
endfunction()

piper_symbols(${PLUGIN} --undefined-only needed)
piper_symbols(${LOADER} --defined-only exported)
list(REMOVE_ITEM needed ${exported})
if(needed)
  list(JOIN needed "\n  " missing)
  message(FATAL_ERROR "${LOADER} does not export what ${PLUGIN} needs from the engine (link "
                      "the whole engine archive, cmake/PiperCuda.cmake):\n  ${missing}")
endif()
