/* Put first on the include path by -DEBB_HIDE_CUDA_TOOLKIT=ON: a build
 * that includes a CUDA header fails here, which proves ebb builds with no
 * CUDA toolkit installed (it declares the driver types it uses itself). */
#error "ebb must build without the CUDA toolkit: do not include cuda_runtime.h (see src/device/cuda_api.h)"
