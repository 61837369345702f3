/* Shared by the fuzz harnesses (tests/fuzz/fuzz_<target>.c). A harness is
 * built twice: with replay_main.c (ctest `fuzz_<target>`, gcc, every CI run)
 * and with libFuzzer (scripts/fuzz.sh, clang). Either way a broken invariant
 * is FUZZ_CHECK -> message + abort(), which both drivers report as a crash
 * with the input that caused it. */
#ifndef EBB_FUZZ_UTIL_H
#define EBB_FUZZ_UTIL_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_CHECK(cond, ...)                                                           \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      fprintf(stderr, "%s:%d: fuzz invariant broken: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                     \
      fputc('\n', stderr);                                                              \
      fflush(stderr);                                                                   \
      abort();                                                                          \
    }                                                                                   \
  } while (0)

/* EBB_FUZZ_KNOWN=1: tolerate the bugs already recorded as crash-* files
 * (tests/fuzz/README.md lists them), so that fuzzing goes on past them. */
static inline int fuzz_known(void) {
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("EBB_FUZZ_KNOWN");
    v = e && *e == '1';
  }
  return v;
}

/* A NUL-terminated copy of the input (caller frees). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s)
    abort();
  if (size)
    memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

/* A scratch directory for this process (created once, under $EBB_TEST_TMP
 * or /tmp); sub names a subdirectory created inside it. Returns a static
 * path. */
static inline const char *fuzz_scratch(const char *sub) {
  static char base[512];
  static char path[600];
  if (!base[0]) {
    const char *t = getenv("EBB_TEST_TMP");
    char tmpl[480];
    if (t && *t) {
      mkdir(t, 0755);
      snprintf(tmpl, sizeof tmpl, "%s/fuzzXXXXXX", t);
    } else {
      snprintf(tmpl, sizeof tmpl, "/tmp/ebb-fuzzXXXXXX");
    }
    if (!mkdtemp(tmpl)) {
      perror("fuzz: mkdtemp");
      abort();
    }
    snprintf(base, sizeof base, "%s", tmpl);
  }
  snprintf(path, sizeof path, "%s/%s", base, sub);
  mkdir(path, 0755);
  return path;
}

/* Removes every plain file in dir (not recursive). */
static inline void fuzz_empty_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  char p[1200];
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  closedir(d);
}

static inline void fuzz_write_file(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
    perror(path);
    abort();
  }
}

#endif
