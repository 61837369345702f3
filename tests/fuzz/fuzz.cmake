# Fuzz harnesses (tests/fuzz/fuzz_<target>.c), built two ways:
#  - always: linked with replay_main.c into fuzz_<target>_replay, ctest test
#    fuzz_<target>: the corpus (tests/fuzz/corpus/<target>/) then
#    EBB_FUZZ_REPLAY_ITERS seeded mutations (under ASan in `make asan`);
#  - EBB_FUZZ_LIBFUZZER=ON (clang; scripts/fuzz.sh sets it): fuzz_<target>,
#    a libFuzzer binary.
set(EBB_FUZZ_TARGETS config options policy cache transcribe decode ledger wire)
set(EBB_FUZZ_REPLAY_ITERS 2000 CACHE STRING "mutations per fuzz_<target> ctest run")
option(EBB_FUZZ_LIBFUZZER "Also build libFuzzer binaries (needs clang)" OFF)
set(EBB_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})

foreach(t ${EBB_FUZZ_TARGETS})
  add_executable(fuzz_${t}_replay ${EBB_FUZZ_DIR}/fuzz_${t}.c ${EBB_FUZZ_DIR}/replay_main.c)
  target_include_directories(fuzz_${t}_replay PRIVATE ${EBB_FUZZ_DIR})
  target_link_libraries(fuzz_${t}_replay PRIVATE ebb_core Threads::Threads)
  set(dict_args "")
  if(EXISTS ${EBB_FUZZ_DIR}/dict/${t}.dict)
    set(dict_args --dict ${EBB_FUZZ_DIR}/dict/${t}.dict)
  endif()
  add_test(NAME fuzz_${t} COMMAND fuzz_${t}_replay ${EBB_FUZZ_DIR}/corpus/${t} ${dict_args}
           --iters ${EBB_FUZZ_REPLAY_ITERS})
  ebb_test_env(fuzz_${t})
  if(EBB_FUZZ_LIBFUZZER)
    add_executable(fuzz_${t} ${EBB_FUZZ_DIR}/fuzz_${t}.c)
    target_include_directories(fuzz_${t} PRIVATE ${EBB_FUZZ_DIR})
    target_link_libraries(fuzz_${t} PRIVATE ebb_core Threads::Threads)
    target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  endif()
endforeach()
