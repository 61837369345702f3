# stages_pitch_isa: pitch_yin.c built a second time with its clones off
# (-DPY_CLONES=: the baseline code a CPU without AVX2 runs) into
# stages_pitch_isa_baseline, whose pitch_yin.o takes the place of the
# library's; the test runs it and compares its results with its own
# (tests/unit/stages_pitch_isa.c).
add_executable(stages_pitch_isa_baseline ${CMAKE_SOURCE_DIR}/tests/unit/stages_pitch_isa.c
  ${CMAKE_SOURCE_DIR}/src/stages/audio/pitch_yin.c)
target_compile_definitions(stages_pitch_isa_baseline PRIVATE PY_CLONES=
  EBB_PITCH_ISA_BASELINE="")
target_include_directories(stages_pitch_isa_baseline PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(stages_pitch_isa_baseline PRIVATE ebb_core Threads::Threads)
ebb_room_exports(stages_pitch_isa_baseline)
target_compile_definitions(stages_pitch_isa PRIVATE
  EBB_PITCH_ISA_BASELINE="$<TARGET_FILE:stages_pitch_isa_baseline>")
add_dependencies(stages_pitch_isa stages_pitch_isa_baseline)
