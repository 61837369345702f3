# bench_pitch: pitch accuracy against aubio (aubiopitch, Debian aubio-tools)
# on songgen clips with ground truth, and speed. bench/CMakeLists.txt's glob
# may already have made the target from bench_pitch.c; define it only if not.
if(NOT TARGET bench_bench_pitch)
  add_executable(bench_bench_pitch ${CMAKE_CURRENT_LIST_DIR}/bench_pitch.c)
  set_target_properties(bench_bench_pitch PROPERTIES OUTPUT_NAME bench_pitch
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench ENABLE_EXPORTS ON)
  target_link_libraries(bench_bench_pitch PRIVATE ebb_core Threads::Threads m)
endif()
