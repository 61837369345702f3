# Pipeline room tests: test plugins (tests/support/pipeline_test_plugin.c built
# several ways), each alone in a directory under build/tests/plugins/, and the
# tests' knowledge of where they and the example plugin are.
set(EBB_TEST_PLUGIN_DIR ${CMAKE_BINARY_DIR}/tests/plugins)
set(EBB_TEST_PLUGINS good bad_abi no_init init_fails no_run old_size)
set(EBB_TEST_PLUGIN_DEFS_good "")
set(EBB_TEST_PLUGIN_DEFS_bad_abi PLUGIN_BAD_ABI=1)
set(EBB_TEST_PLUGIN_DEFS_no_init PLUGIN_NO_INIT=1)
set(EBB_TEST_PLUGIN_DEFS_init_fails PLUGIN_INIT_FAILS=1)
set(EBB_TEST_PLUGIN_DEFS_no_run PLUGIN_NO_RUN=1)
set(EBB_TEST_PLUGIN_DEFS_old_size PLUGIN_OLD_SIZE=1)
foreach(p ${EBB_TEST_PLUGINS})
  add_library(pipeline_plugin_${p} MODULE ${CMAKE_SOURCE_DIR}/tests/support/pipeline_test_plugin.c)
  set_target_properties(pipeline_plugin_${p} PROPERTIES PREFIX "" OUTPUT_NAME ${p}
    LIBRARY_OUTPUT_DIRECTORY ${EBB_TEST_PLUGIN_DIR}/${p} C_VISIBILITY_PRESET hidden)
  if(EBB_TEST_PLUGIN_DEFS_${p})
    target_compile_definitions(pipeline_plugin_${p} PRIVATE ${EBB_TEST_PLUGIN_DEFS_${p}})
  endif()
  list(APPEND EBB_TEST_PLUGIN_TARGETS pipeline_plugin_${p})
endforeach()

# Deferred to the end of the directory so the integration tests exist too.
function(ebb_pipeline_tests_env)
  get_property(all DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTY TESTS)
  foreach(t ${all})
    if(t MATCHES "^(pipeline|run)_")
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
        "EBB_TEST_PLUGIN_DIR=${EBB_TEST_PLUGIN_DIR}"
        "EBB_EXAMPLE_PLUGIN_DIR=${CMAKE_BINARY_DIR}/examples/stages"
        "EBB_ABORTCUDA=${CMAKE_BINARY_DIR}/tests/support/libabortcuda.so"
        "EBB_PLUGIN_PATH="
        "EBB_STAGE_HOOK=")
      set_tests_properties(${t} PROPERTIES TIMEOUT 180)
    endif()
  endforeach()
  # separate on a 5-minute input on the fake GPU: about 100 s on a busy 2-core box
  if(TEST pipeline_estimate)
    set_tests_properties(pipeline_estimate PROPERTIES TIMEOUT 600)
    if(EBB_SANITIZE) # 396 s alone under ASan on 5 minutes: 2 minutes there
      set_property(TEST pipeline_estimate APPEND PROPERTY ENVIRONMENT "EBB_TEST_SLOWDOWN=4")
    endif()
  endif()
endfunction()
file(GLOB ebb_pipeline_unit CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/unit/pipeline_*.c)
foreach(src ${ebb_pipeline_unit})
  get_filename_component(t ${src} NAME_WE)
  add_dependencies(${t} ${EBB_TEST_PLUGIN_TARGETS} ebb_example_checksum)
endforeach()
if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.19)
  cmake_language(DEFER CALL ebb_pipeline_tests_env)
else()
  ebb_pipeline_tests_env()
endif()
