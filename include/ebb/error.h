/* ebb's one error convention: functions return int, 0 for success or a
 * negative EBB_E... code, and leave a human message on the calling thread
 * that names the thing that was wrong (file, line, option, owner, bytes). */
#ifndef EBB_ERROR_H
#define EBB_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, default message) */
#define EBB_ERRORS(X)                                                          \
  X(EBB_OK, 0, "success")                                                      \
  X(EBB_EINVAL, -1, "invalid argument")                                        \
  X(EBB_ENOMEM, -2, "out of host memory")                                      \
  X(EBB_EOOM, -3, "out of device memory")                                      \
  X(EBB_ENODEV, -4, "no such device")                                          \
  X(EBB_EDRIVER, -5, "GPU driver error")                                       \
  X(EBB_ENOTFOUND, -6, "not found")                                            \
  X(EBB_EIO, -7, "input/output error")                                         \
  X(EBB_ECONFIG, -8, "bad configuration")                                      \
  X(EBB_EINPUT, -9, "bad input")                                               \
  X(EBB_ECANCELED, -10, "canceled")                                            \
  X(EBB_ETIMEDOUT, -11, "timed out")                                           \
  X(EBB_EQUOTA, -12, "over quota")                                             \
  X(EBB_EABI, -13, "ABI mismatch")                                             \
  X(EBB_EBUSY, -14, "busy")                                                    \
  X(EBB_ESTATE, -15, "invalid state")                                          \
  X(EBB_EUNSUPPORTED, -16, "not supported")                                    \
  X(EBB_ESTAGE, -17, "stage failed")                                           \
  X(EBB_EPROTO, -18, "protocol error")                                         \
  X(EBB_ENOLIB, -19, "library not found")

enum {
#define EBB_ERROR_ENUM_(name, value, msg) name = value,
  EBB_ERRORS(EBB_ERROR_ENUM_)
#undef EBB_ERROR_ENUM_
};

/* The static name-free description of a code ("out of device memory"). */
const char *ebb_strerror(int code);
/* The symbolic name of a code ("EBB_EOOM"). */
const char *ebb_errname(int code);

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
