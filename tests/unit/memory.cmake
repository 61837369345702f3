# The memory room's tests: the ledger test parses the timeline JSON with jansson.
target_link_libraries(memory_ledger PRIVATE PkgConfig::JANSSON)

# The memory room's files call each other in one direction (no cycles), and
# cross-file internals carry the mem__ prefix: checked on the library's
# object files with nm.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME memory_layering
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/memory_layering.py
            $<TARGET_FILE:ebb_memory>)
else()
  add_test(NAME memory_layering
    COMMAND sh -c "echo 'memory_layering: no python3 found at configure time' >&2; exit 1")
endif()
set_property(TEST memory_layering APPEND PROPERTY ENVIRONMENT "NM=${CMAKE_NM}")

# Skipped (77) on a fake with no simulated kernel time (FAKEGPU_KERNEL_US).
set_tests_properties(memory_streams PROPERTIES SKIP_RETURN_CODE 77)
