/* Logging (log.h): text and JSON lines, levels, one whole line per write. */
#include "base/log.h"
#include "base/text.h"

#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static base_log_format log_format = EBB_LOG_TEXT;
static base_log_level log_min = EBB_LOG_INFO;
static FILE *log_stream;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void base_log_set_format(base_log_format f) { log_format = f; }
base_log_format base_log_get_format(void) { return log_format; }
void base_log_set_level(base_log_level min) { log_min = min; }
void base_log_set_stream(FILE *f) { log_stream = f; }
static void emit(base_log_level level, const char *scope, const base_log_field *fields, int nfields,
                 const char *fmt, va_list ap) {
  if (level < log_min)
    return;
  char msg[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  FILE *f = log_stream ? log_stream : stdout;
  pthread_mutex_lock(&log_lock);
  if (log_format == EBB_LOG_JSON) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fprintf(f, "{\"ts\":%.3f,\"level\":\"%s\"", (double)ts.tv_sec + (double)ts.tv_nsec / 1e9,
            level_names[level]);
    if (scope) {
      fputs(",\"scope\":", f);
      base_write_json_str(f, scope);
    }
    fputs(",\"msg\":", f);
    base_write_json_str(f, msg);
    for (int i = 0; i < nfields; i++) {
      fputc(',', f);
      base_write_json_str(f, fields[i].key);
      fputc(':', f);
      switch (fields[i].type) {
      case EBB_LF_STR: base_write_json_str(f, fields[i].v.s); break;
      case EBB_LF_I64: fprintf(f, "%lld", (long long)fields[i].v.i); break;
      case EBB_LF_U64: fprintf(f, "%llu", (unsigned long long)fields[i].v.u); break;
      case EBB_LF_F64: fprintf(f, "%.6g", fields[i].v.f); break;
      }
    }
    fputs("}\n", f);
  } else if (scope) {
    fprintf(f, "[%s] %s\n", scope, msg);
  } else {
    fprintf(f, "%s\n", msg);
  }
  fflush(f);
  pthread_mutex_unlock(&log_lock);
}

void base_log(base_log_level level, const char *scope, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit(level, scope, NULL, 0, fmt, ap);
  va_end(ap);
}

void base_log_ev(base_log_level level, const char *scope, const base_log_field *fields, int nfields,
                 const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit(level, scope, fields, nfields, fmt, ap);
  va_end(ap);
}
