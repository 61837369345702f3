#include "ebb/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char err_msg[1024];
static _Thread_local int err_code;

const char *ebb_strerror(int code) {
  switch (code) {
#define EBB_ERROR_STR_(name, value, msg)                                       \
  case value:                                                                  \
    return msg;
    EBB_ERRORS(EBB_ERROR_STR_)
#undef EBB_ERROR_STR_
  }
  return "unknown error";
}

const char *ebb_errname(int code) {
  switch (code) {
#define EBB_ERROR_NAME_(name, value, msg)                                      \
  case value:                                                                  \
    return #name;
    EBB_ERRORS(EBB_ERROR_NAME_)
#undef EBB_ERROR_NAME_
  }
  return "EBB_E?";
}

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

const char *ebb_errmsg(void) {
  return err_msg[0] ? err_msg : ebb_strerror(err_code);
}

void ebb_clearerr(void) {
  err_msg[0] = '\0';
  err_code = 0;
}
