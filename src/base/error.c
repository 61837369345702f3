/* The error table's columns for ebb's programs (error.h): exit status,
 * HTTP status and wire name of each code. */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char err_msg[1024];
static _Thread_local int err_code;

/* One row of EBB_ERRORS, found by code. */
typedef struct err_row {
  int value, exit;
  unsigned http;
  const char *name, *wire, *msg;
} err_row;

static const err_row rows[] = {
#define EBB_ERROR_ROW_(name, value, exit, http, wire, msg) {value, exit, http, #name, wire, msg},
    EBB_ERRORS(EBB_ERROR_ROW_)
#undef EBB_ERROR_ROW_
};

static const err_row *row_of(int code) {
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (rows[i].value == code)
      return &rows[i];
  return NULL;
}

static const err_row *row_or_stage(int code) {
  const err_row *r = row_of(code);
  return r ? r : row_of(EBB_ESTAGE);
}

const char *ebb_strerror(int code) {
  const err_row *r = row_of(code);
  return r ? r->msg : "unknown error";
}

const char *ebb_errname(int code) {
  const err_row *r = row_of(code);
  return r ? r->name : "EBB_E?";
}

int base_errcode(const char *name, int fallback) {
  for (size_t i = 0; name && i < sizeof rows / sizeof rows[0]; i++)
    if (!strcmp(rows[i].name, name))
      return rows[i].value;
  return fallback;
}

int base_exit_status(int code) { return row_or_stage(code)->exit; }
unsigned base_http_status(int code) { return row_or_stage(code)->http; }
const char *base_wire_name(int code) { return row_or_stage(code)->wire; }

int ebb_seterr(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err_msg, sizeof err_msg, fmt, ap);
  va_end(ap);
  err_code = code;
  return code;
}

int ebb_errctx(int code, const char *fmt, ...) {
  char prefix[512], old[sizeof err_msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  snprintf(old, sizeof old, "%s", err_msg[0] ? err_msg : ebb_strerror(code));
  size_t n = strlen(prefix);
  if (n >= sizeof err_msg)
    n = sizeof err_msg - 1;
  memcpy(err_msg, prefix, n);
  size_t m = strlen(old);
  if (m > sizeof err_msg - 1 - n)
    m = sizeof err_msg - 1 - n;
  memcpy(err_msg + n, old, m);
  err_msg[n + m] = '\0';
  err_code = code;
  return code;
}

const char *ebb_errmsg(void) { return err_msg[0] ? err_msg : ebb_strerror(err_code); }

void ebb_clearerr(void) {
  err_msg[0] = '\0';
  err_code = 0;
}
