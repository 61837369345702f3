# Device room tests: helper libraries under tests/support/ and the tests'
# knowledge of where they are.
#   abortcuda       every exported driver/NVML entry point calls abort()
#   markcuda_gpa    a tiny libcuda with cuGetProcAddress_v2 (loader tests)
#   markcuda_nogpa  the same without cuGetProcAddress_v2
set(EBB_SUPPORT_DIR ${CMAKE_BINARY_DIR}/tests/support)
add_library(abortcuda SHARED ${CMAKE_SOURCE_DIR}/tests/support/abortcuda.c)
add_library(markcuda_gpa SHARED ${CMAKE_SOURCE_DIR}/tests/support/markcuda.c)
target_compile_definitions(markcuda_gpa PRIVATE MARKCUDA_GPA=1)
add_library(markcuda_nogpa SHARED ${CMAKE_SOURCE_DIR}/tests/support/markcuda.c)
foreach(lib abortcuda markcuda_gpa markcuda_nogpa)
  set_target_properties(${lib} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${EBB_SUPPORT_DIR})
endforeach()
set_target_properties(markcuda_gpa markcuda_nogpa PROPERTIES C_VISIBILITY_PRESET hidden)

foreach(t device_loader device_nodriver device_open device_errors device_lazy device_probe
          device_segments device_release)
  if(TARGET ${t})
    target_compile_definitions(${t} PRIVATE
      ABORTCUDA_PATH="$<TARGET_FILE:abortcuda>"
      MARKCUDA_GPA_PATH="$<TARGET_FILE:markcuda_gpa>"
      MARKCUDA_NOGPA_PATH="$<TARGET_FILE:markcuda_nogpa>")
    add_dependencies(${t} abortcuda markcuda_gpa markcuda_nogpa)
  endif()
endforeach()

# A device test exits 77 when what it checks cannot be checked here (e.g. a
# fake-only behaviour under EBB_REAL_GPU=1); ctest reports it as skipped.
# Deferred to the end of the directory so the integration tests exist too.
function(ebb_device_tests_skip_code)
  get_property(all DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTY TESTS)
  foreach(t ${all})
    if(t MATCHES "^device_")
      set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77)
    endif()
  endforeach()
endfunction()
if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.19)
  cmake_language(DEFER CALL ebb_device_tests_skip_code)
else()
  ebb_device_tests_skip_code()
endif()
