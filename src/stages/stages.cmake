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
# Lyrics (issue 36): espeak-ng speaks the synthetic songs' words (speech.c)
# and pocketsphinx aligns lyrics to the voice (align_acoustic.c). Both are
# Debian packages scripts/install-deps.sh installs, but optional here: without
# them ebb still builds, songgen sings vowels only and align's acoustic
# method fails with an error naming the missing package.
pkg_check_modules(ESPEAK_NG IMPORTED_TARGET espeak-ng)
if(ESPEAK_NG_FOUND)
  target_link_libraries(ebb_stages PUBLIC PkgConfig::ESPEAK_NG)
  target_compile_definitions(ebb_stages PRIVATE EBB_HAVE_ESPEAK=1)
else()
  message(STATUS "espeak-ng not found: songgen sings vowels only (apt install libespeak-ng-dev)")
endif()
pkg_check_modules(POCKETSPHINX pocketsphinx sphinxbase)
if(POCKETSPHINX_FOUND)
  # not an imported target: the .pc names /usr/include/sphinxbase, which
  # Debian does not ship, and CMake refuses an imported target with a missing
  # directory; so the libraries, and the directories that exist
  target_link_libraries(ebb_stages PUBLIC ${POCKETSPHINX_LINK_LIBRARIES})
  foreach(d ${POCKETSPHINX_INCLUDE_DIRS})
    if(IS_DIRECTORY ${d})
      target_include_directories(ebb_stages SYSTEM PRIVATE ${d})
    endif()
  endforeach()
  target_compile_definitions(ebb_stages PRIVATE EBB_HAVE_POCKETSPHINX=1)
else()
  message(STATUS "pocketsphinx not found: align's acoustic method is unavailable "
    "(apt install libpocketsphinx-dev pocketsphinx-en-us)")
endif()
