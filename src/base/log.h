/* Logging. Text lines are "[scope] message" (scope omitted when NULL), which
 * is the format of the fixed log lines (docs/api.md, "Log lines"); the JSON format writes one
 * object per line with the same message plus structured fields:
 *   {"ts":..., "level":"info", "scope":"separate", "msg":"released 3704 MiB of GPU memory",
 *    "event":"released", "released_bytes":3884...}
 * The sink is stdout by default; thread-safe (one line is written whole).
 * Nothing in ebb reads these lines back: what they say is published as an
 * event first (base/events.h), and the release and leak lines are written
 * by the log's subscription to those events (events_log.c). */
#ifndef EBB_BASE_LOG_H
#define EBB_BASE_LOG_H

#include <stdint.h>
#include <stdio.h>

typedef enum { EBB_LOG_DEBUG, EBB_LOG_INFO, EBB_LOG_WARN, EBB_LOG_ERROR } base_log_level;
typedef enum { EBB_LOG_TEXT, EBB_LOG_JSON } base_log_format;

/* A structured field for the JSON format; ignored by the text format. */
typedef enum { EBB_LF_STR, EBB_LF_I64, EBB_LF_U64, EBB_LF_F64 } base_log_ftype;
typedef struct base_log_field {
  const char *key;
  base_log_ftype type;
  union {
    const char *s;
    int64_t i;
    uint64_t u;
    double f;
  } v;
} base_log_field;
#define EBB_LF_S(k, x) ((base_log_field){.key = (k), .type = EBB_LF_STR, .v.s = (x)})
#define EBB_LF_I(k, x) ((base_log_field){.key = (k), .type = EBB_LF_I64, .v.i = (x)})
#define EBB_LF_U(k, x) ((base_log_field){.key = (k), .type = EBB_LF_U64, .v.u = (x)})
#define EBB_LF_F(k, x) ((base_log_field){.key = (k), .type = EBB_LF_F64, .v.f = (x)})

void base_log_set_format(base_log_format f);
base_log_format base_log_get_format(void);
void base_log_set_level(base_log_level min);
/* The stream is borrowed, not closed by ebb. NULL restores stdout. */
void base_log_set_stream(FILE *f);

void base_log(base_log_level level, const char *scope, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void base_log_ev(base_log_level level, const char *scope, const base_log_field *fields, int nfields,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
