/* ebb's one error convention: functions return int, 0 for success or a
 * negative EBB_E... code, and leave a human message on the calling thread
 * that names the thing that was wrong (file, line, option, owner, bytes). */
#ifndef EBB_ERROR_H
#define EBB_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* The one table of error codes. Columns:
 *   X(name, value, exit, http, wire, default message)
 * exit: the status `ebb` exits with when a command ends on this code before
 *   any stage ran (0 ok, 1 the job failed, 2 bad usage or bad input);
 * http: the status the server answers with; wire: the "code" of the
 *   server's error JSON {"error": {"code": wire, "message": ...}}. */
#define EBB_ERRORS(X)                                                          \
  X(EBB_OK, 0, 0, 200, "ok", "success")                                        \
  X(EBB_EINVAL, -1, 2, 400, "bad_request", "invalid argument")                 \
  X(EBB_ENOMEM, -2, 1, 500, "internal", "out of host memory")                  \
  X(EBB_EOOM, -3, 1, 503, "out_of_memory", "out of device memory")             \
  X(EBB_ENODEV, -4, 2, 500, "internal", "no such device")                      \
  X(EBB_EDRIVER, -5, 1, 500, "internal", "GPU driver error")                   \
  X(EBB_ENOTFOUND, -6, 2, 404, "not_found", "not found")                       \
  X(EBB_EIO, -7, 1, 500, "internal", "input/output error")                     \
  X(EBB_ECONFIG, -8, 2, 400, "bad_request", "bad configuration")               \
  X(EBB_EINPUT, -9, 2, 400, "bad_request", "bad input")                        \
  X(EBB_ECANCELED, -10, 1, 500, "internal", "canceled")                        \
  X(EBB_ETIMEDOUT, -11, 1, 500, "internal", "timed out")                       \
  X(EBB_EQUOTA, -12, 1, 503, "out_of_memory", "over quota")                    \
  X(EBB_EABI, -13, 2, 500, "internal", "ABI mismatch")                         \
  X(EBB_EBUSY, -14, 1, 409, "conflict", "busy")                                \
  X(EBB_ESTATE, -15, 1, 409, "conflict", "invalid state")                      \
  X(EBB_EUNSUPPORTED, -16, 2, 400, "bad_request", "not supported")             \
  X(EBB_ESTAGE, -17, 1, 500, "internal", "stage failed")                       \
  X(EBB_EPROTO, -18, 1, 500, "internal", "protocol error")                     \
  X(EBB_ENOLIB, -19, 2, 500, "internal", "library not found")

enum {
#define EBB_ERROR_ENUM_(name, value, exit, http, wire, msg) name = value,
  EBB_ERRORS(EBB_ERROR_ENUM_)
#undef EBB_ERROR_ENUM_
};

/* The static name-free description of a code ("out of device memory"). */
const char *ebb_strerror(int code);
/* The symbolic name of a code ("EBB_EOOM"). */
const char *ebb_errname(int code);
/* The code named "EBB_EOOM"; fallback for a name not in the table. */
int ebb_errcode(const char *name, int fallback);
/* The table's columns for a code; an unknown code reads as EBB_ESTAGE. */
int ebb_exit_status(int code);   /* 0, 1 or 2 */
unsigned ebb_http_status(int code);
const char *ebb_wire_name(int code); /* "not_found" */

/* Sets the calling thread's message (printf-style) and returns code, so a
 * failing path reads `return ebb_seterr(EBB_EINPUT, "%s: empty file", path);`. */
int ebb_seterr(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The calling thread's last message; ebb_strerror of the last code if it set
 * none. Valid until the next ebb call on this thread. */
const char *ebb_errmsg(void);
/* Prefixes the calling thread's message with more context ("stage 'a': ")
 * and returns code unchanged. */
int ebb_errctx(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ebb_clearerr(void);

#ifdef __cplusplus
}
#endif
#endif
