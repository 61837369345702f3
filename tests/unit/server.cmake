# Server and manager tests: no stage hook from the caller's environment (the
# switch test sets its own), no whisper server (songtrace's transcribe is
# skipped), and room for the slower sanitizer builds (songtrace on an upload
# takes ~13 s in a release build, ~40 s under ASan).
function(ebb_server_tests_env)
  get_property(all DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTY TESTS)
  foreach(t ${all})
    if(t MATCHES "^(server|manager)_")
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
        "EBB_STAGE_HOOK=" "EBB_WHISPER_URL=" "EBB_PLUGIN_PATH=")
      set_tests_properties(${t} PROPERTIES TIMEOUT 180)
      if(t STREQUAL "server_openapi") # two schemathesis runs of at most 200 s each
        set_tests_properties(${t} PROPERTIES TIMEOUT 420)
      endif()
      # the latency limits of the server tests (/healthz 50 ms, the read
      # side 100 ms) are for optimised builds; sanitizers run ~4x slower
      if(EBB_SANITIZE)
        set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "EBB_TEST_SLOWDOWN=4")
        if(NOT t STREQUAL "server_openapi")
          set_tests_properties(${t} PROPERTIES TIMEOUT 400) # songtrace on a busy 2-core box
        endif()
      endif()
    endif()
  endforeach()
endfunction()
if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.19)
  cmake_language(DEFER CALL ebb_server_tests_env)
else()
  ebb_server_tests_env()
endif()
