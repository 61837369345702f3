/* See st_util.h. */
#include "stages/audio/st_util.h"

#include <ctype.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int stg_st_fail(ebb_stage_ctx *ctx, int code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ebb_set_error(ctx, code, msg);
}

void stg_st_log(ebb_stage_ctx *ctx, int level, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ebb_stage_log(ctx, level, msg);
}

int stg_st_find_mono(ebb_stage_ctx *ctx, const ebb_items *in, const char *const *names,
                     float **mono, uint64_t *frames, uint32_t *rate, const char **used) {
  for (; *names; names++) {
    ebb_item_info info;
    memset(&info, 0, sizeof info);
    info.size = sizeof info;
    if (ctx->host->item_find(in, *names, &info) != 0)
      continue;
    if (info.kind != EBB_ITEM_AUDIO || !info.channels || !info.rate ||
        (info.frames && !info.samples))
      return stg_st_fail(ctx, EBB_EINPUT,
                         "item \"%s\" is not usable AUDIO (kind %d, %u channels, %u Hz)", *names,
                         (int)info.kind, info.channels, info.rate);
    float *m = stg_st_malloc((info.frames ? info.frames : 1) * sizeof *m);
    if (!m)
      return stg_st_fail(ctx, EBB_ENOMEM, "out of memory for %llu samples of \"%s\"",
                         (unsigned long long)info.frames, *names);
    for (uint64_t i = 0; i < info.frames; i++) {
      float s = 0.0f;
      for (uint32_t c = 0; c < info.channels; c++)
        s += info.samples[i * info.channels + c];
      m[i] = s / (float)info.channels;
    }
    *mono = m;
    *frames = info.frames;
    *rate = info.rate;
    *used = *names;
    return 0;
  }
  return EBB_ENOTFOUND;
}

/* --- host working buffers counted for the running stage ------------------------- */
static __thread ebb_stage_ctx *st_host;
void stg_st_host_begin(ebb_stage_ctx *ctx) { st_host = ctx; }
void stg_st_host_end(void) { st_host = NULL; }
ebb_stage_ctx *stg_st_host_ctx(void) { return st_host; }
void stg_st_free(void *p) {
  if (!p)
    return;
  if (EBB_HOST_HAS_ALLOC_(st_host) && st_host->host->host_free(st_host, p) == 0)
    return;
  free(p);
}

/* --- cancellation below a stage's run ------------------------------------------- */
static __thread ebb_stage_ctx *st_watch;
static __thread int st_stopped;
void stg_st_watch(ebb_stage_ctx *ctx) {
  st_watch = ctx;
  st_stopped = 0;
}
void stg_st_unwatch(void) {
  st_watch = NULL;
  st_stopped = 0;
}
int stg_st_stop(void) {
  if (!st_stopped && st_watch && st_watch->host->cancelled(st_watch))
    st_stopped = 1;
  return st_stopped;
}
uint64_t stg_st_file_words(const char *path, uint64_t max_bytes) {
  int fd = path && *path ? open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) : -1;
  struct stat st;
  uint64_t words = 0;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max_bytes) {
    if (fd >= 0)
      close(fd);
    return 0;
  }
  unsigned char buf[65536];
  int in_word = 0;
  uint64_t total = 0;
  for (ssize_t got; total <= max_bytes && (got = read(fd, buf, sizeof buf)) > 0;) {
    total += (uint64_t)got;
    for (ssize_t i = 0; i < got; i++) {
      int sp = isspace(buf[i]);
      words += !sp && !in_word;
      in_word = !sp;
    }
  }
  close(fd);
  return words;
}

int stg_st_stopped(ebb_stage_ctx *ctx, const char *what) {
  if (!stg_st_stop())
    return 0;
  return stg_st_fail(ctx, EBB_ECANCELED, "cancelled during %s", what);
}
