# The fake GPU's tests need none of ebb: they load the fake through dlopen
# like ebb does, so they build (and prove the fake) even while ebb does not.
file(GLOB FAKEGPU_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/fakegpu_*.c)
foreach(src ${FAKEGPU_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  set_property(TARGET ${name} PROPERTY LINK_LIBRARIES Threads::Threads ${CMAKE_DL_LIBS})
  add_dependencies(${name} fakecuda fakenvml fakegpu-smi fakegpu-hold)
endforeach()

# The liveness test drives the state file directly.
if(TARGET fakegpu_state_liveness)
  target_sources(fakegpu_state_liveness PRIVATE ${CMAKE_SOURCE_DIR}/tests/fakegpu/fg_state.c)
  target_include_directories(fakegpu_state_liveness PRIVATE ${CMAKE_SOURCE_DIR}/tests/fakegpu)
endif()
