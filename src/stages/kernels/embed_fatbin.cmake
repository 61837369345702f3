# cmake -DIN=file.fatbin -DOUT=file.c -P embed_fatbin.cmake
# Writes `stg_kernels_fatbin` / `stg_kernels_fatbin_size` (kernels.h) as C.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" nhex)
math(EXPR size "${nhex} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT}
  "/* generated from ${IN} by embed_fatbin.cmake */\n"
  "#include <stddef.h>\n"
  "__attribute__((aligned(16))) const unsigned char stg_kernels_fatbin[${size}] = {\n"
  "${bytes}};\n"
  "const size_t stg_kernels_fatbin_size = ${size};\n")
