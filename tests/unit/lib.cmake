# libebb.so's tests. lib_torch_alloc loads the library with dlopen, as
# PyTorch's CUDAPluggableAllocator does, so it links nothing of ebb.
add_executable(lib_torch_alloc ${CMAKE_SOURCE_DIR}/tests/lib/torch_harness.c)
target_include_directories(lib_torch_alloc PRIVATE ${CMAKE_SOURCE_DIR}/tests ${CMAKE_SOURCE_DIR}/tests/lib)
target_link_libraries(lib_torch_alloc PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
add_dependencies(lib_torch_alloc ebb_shared)
add_test(NAME lib_torch_alloc COMMAND lib_torch_alloc)
ebb_test_env(lib_torch_alloc)
set_property(TEST lib_torch_alloc APPEND PROPERTY ENVIRONMENT "EBB_LIBEBB=$<TARGET_FILE:ebb_shared>")
set_tests_properties(lib_torch_alloc PROPERTIES TIMEOUT 120)
