# bench_separate: SDR and speed of the separate stage (CPU/FFTW vs kernels).
add_executable(bench_separate ${CMAKE_CURRENT_LIST_DIR}/bench_separate.c)
target_include_directories(bench_separate PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(bench_separate PRIVATE ebb_core Threads::Threads m)
# the kernels' host twins are found with dlsym, as on the fake GPU
set_target_properties(bench_separate PROPERTIES ENABLE_EXPORTS ON)
