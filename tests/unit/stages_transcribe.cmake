# The transcribe stage's tests talk to a Whisper-compatible test server
# (tests/support/whisper_server.c, libmicrohttpd): built as a library for the
# unit tests and as the program `tests/whisper_server` (prints "PORT n") for
# the integration test and for trying ebb by hand (EBB_WHISPER_URL).
if(NOT TARGET PkgConfig::MICROHTTPD)
  pkg_check_modules(MICROHTTPD REQUIRED IMPORTED_TARGET libmicrohttpd)
endif()
add_library(ebb_test_whisper_server STATIC ${CMAKE_SOURCE_DIR}/tests/support/whisper_server.c)
target_link_libraries(ebb_test_whisper_server PUBLIC PkgConfig::MICROHTTPD Threads::Threads)

add_executable(whisper_server ${CMAKE_SOURCE_DIR}/tests/support/whisper_server.c)
target_compile_definitions(whisper_server PRIVATE WHISPER_SERVER_MAIN=1)
target_link_libraries(whisper_server PRIVATE PkgConfig::MICROHTTPD Threads::Threads)
set_target_properties(whisper_server PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)

foreach(t stages_transcribe_http stages_transcribe_stage)
  if(TARGET ${t})
    target_link_libraries(${t} PRIVATE ebb_test_whisper_server)
  endif()
endforeach()
# The tests reach 127.0.0.1 directly even where a proxy is configured.
foreach(t stages_transcribe_http stages_transcribe_stage stages_transcribe_server)
  if(TEST ${t})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "no_proxy=127.0.0.1,localhost"
      "NO_PROXY=127.0.0.1,localhost")
  endif()
endforeach()
