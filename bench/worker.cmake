# bench/worker_roundtrip.c: the worker protocol's round trip against a Python
# worker on the SDK (bench/worker_echo.py), side by side with an in-process
# call. It drives the worker room directly and finds the script and the
# Python package in the source tree.
add_executable(bench_worker_roundtrip ${CMAKE_CURRENT_SOURCE_DIR}/worker_roundtrip.c)
set_target_properties(bench_worker_roundtrip PROPERTIES OUTPUT_NAME worker_roundtrip
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench ENABLE_EXPORTS ON)
target_include_directories(bench_worker_roundtrip PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}
  ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(bench_worker_roundtrip PRIVATE ebb_core PkgConfig::JANSSON Threads::Threads m)
target_compile_definitions(bench_worker_roundtrip PRIVATE EBB_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
