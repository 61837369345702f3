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

# The kernel-argument check's images (tests/fakegpu/args_kernels.cu), built
# with nvcc where it exists: a cubin for sm_90, a fatbin of sm_80 and sm_90
# cubins compressed as the toolkit compresses libraries, and a fatbin of PTX
# only. Without nvcc the test reports itself skipped (77).
if(TARGET fakegpu_kernel_args)
  set_tests_properties(fakegpu_kernel_args PROPERTIES SKIP_RETURN_CODE 77)
  if(EBB_NVCC)
    set(src ${CMAKE_SOURCE_DIR}/tests/fakegpu/args_kernels.cu)
    set(dir ${CMAKE_BINARY_DIR}/fakegpu/args-images)
    add_custom_command(
      OUTPUT ${dir}/args.cubin ${dir}/args.fatbin ${dir}/args_ptx.fatbin
      COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
      COMMAND ${EBB_NVCC} -cubin -arch=sm_90 -o ${dir}/args.cubin ${src}
      COMMAND ${EBB_NVCC} -fatbin -gencode arch=compute_80,code=sm_80
              -gencode arch=compute_90,code=sm_90 -Xfatbin -compress-all -o ${dir}/args.fatbin ${src}
      COMMAND ${EBB_NVCC} -fatbin -gencode arch=compute_90,code=compute_90
              -o ${dir}/args_ptx.fatbin ${src}
      DEPENDS ${src}
      COMMENT "nvcc: fakegpu/args-images")
    add_custom_target(fakegpu-args-images DEPENDS ${dir}/args.cubin ${dir}/args.fatbin
                                                  ${dir}/args_ptx.fatbin)
    add_dependencies(fakegpu_kernel_args fakegpu-args-images)
    target_compile_definitions(fakegpu_kernel_args PRIVATE FAKEGPU_ARGS_IMAGES="${dir}")
  endif()
endif()
