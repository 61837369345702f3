# Every test runs against the fake GPU with a device of its own, so tests can
# run in parallel. A test may add variables with ENVIRONMENT after this.
set(EBB_TEST_STATE_DIR ${CMAKE_BINARY_DIR}/test-state)
file(MAKE_DIRECTORY ${EBB_TEST_STATE_DIR})

function(ebb_test_env name)
  set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT
    "EBB_LIBCUDA=$<TARGET_FILE:fakecuda>"
    "EBB_LIBNVML=$<TARGET_FILE:fakenvml>"
    "FAKEGPU_SMI=$<TARGET_FILE:fakegpu-smi>"
    "FAKEGPU_STATE=${EBB_TEST_STATE_DIR}/${name}.state"
    "EBB_BUILD_DIR=${CMAKE_BINARY_DIR}"
    "EBB_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
    "EBB_TEST_TMP=${EBB_TEST_STATE_DIR}/${name}.tmp"
    # the stage result cache of `ebb run` defaults to $XDG_CACHE_HOME/ebb:
    # keep tests out of the user's home
    "XDG_CACHE_HOME=${EBB_TEST_STATE_DIR}/${name}.cache"
    # ebb serve registers in $XDG_RUNTIME_DIR/ebb (docs/broker.md): one broker
    # directory per test, so no test's peers give memory to another's asks
    "XDG_RUNTIME_DIR=${EBB_TEST_STATE_DIR}/${name}.run")
endfunction()

# ebb_c_test(NAME SOURCES... [LIBS libs...]): one executable, one ctest test.
function(ebb_c_test name)
  cmake_parse_arguments(T "" "" "LIBS" ${ARGN})
  add_executable(${name} ${T_UNPARSED_ARGUMENTS})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${T_LIBS} Threads::Threads)
  # Kernel host twins (fakegpu_twin_*) must be visible to the fake's dlsym;
  # nothing else is exported (cmake/ebb.dynamic-list).
  ebb_room_exports(${name})
  add_test(NAME ${name} COMMAND ${name})
  ebb_test_env(${name})
endfunction()

# ebb_sh_test(NAME SCRIPT): an integration test that drives the real binaries.
function(ebb_sh_test name script)
  add_test(NAME ${name} COMMAND bash ${script})
  ebb_test_env(${name})
  set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT
    "EBB=$<TARGET_FILE:ebb>"
    "EBB_WORKER=$<TARGET_FILE:ebb-worker>")
endfunction()
