# Libraries the built-in stages use (all Debian packages, see scripts/install-deps.sh).
pkg_check_modules(SNDFILE REQUIRED IMPORTED_TARGET sndfile)
pkg_check_modules(SAMPLERATE REQUIRED IMPORTED_TARGET samplerate)
pkg_check_modules(FFTW3F REQUIRED IMPORTED_TARGET fftw3f)
pkg_check_modules(MPG123 REQUIRED IMPORTED_TARGET libmpg123)
pkg_check_modules(CURL REQUIRED IMPORTED_TARGET libcurl)
target_link_libraries(ebb_stages PUBLIC PkgConfig::SNDFILE PkgConfig::SAMPLERATE
  PkgConfig::FFTW3F PkgConfig::MPG123 PkgConfig::CURL PkgConfig::JANSSON)
# GPU kernels (nvcc -> one embedded fatbin, or an empty image without nvcc).
include(${CMAKE_CURRENT_SOURCE_DIR}/kernels/CMakeLists.txt)
