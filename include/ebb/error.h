/* ebb's one error convention: functions return int, 0 for success or a
 * negative EBB_E... code (include/ebb/error_codes.h), and leave a human
 * message on the calling thread that names the thing that was wrong (file,
 * line, option, owner, bytes). The functions below are libebb's (version
 * node EBB_1.0): a program reads an error with ebb_errmsg / ebb_errname, and
 * code layered over libebb (a binding, a framework hook) may report its own
 * errors the same way with ebb_seterr / ebb_errctx. A plugin stage calls
 * none of them: it reports with ebb_set_error (include/ebb/stage.h). */
#ifndef EBB_ERROR_H
#define EBB_ERROR_H

#include "ebb/error_codes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The static name-free description of a code ("out of device memory");
 * "unknown error" for a code not in the table. */
const char *ebb_strerror(int code);
/* The symbolic name of a code ("EBB_EOOM"); "EBB_E?" for one not in it. */
const char *ebb_errname(int code);
/* Sets the calling thread's message (printf-style) and returns code, so a
 * failing path reads `return ebb_seterr(EBB_EINPUT, "%s: empty file", path);`. */
int ebb_seterr(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The calling thread's last message; ebb_strerror of the last code if it set
 * none. Valid until the next ebb call on this thread. */
const char *ebb_errmsg(void);
/* Prefixes the calling thread's message with more context ("stage 'a': ")
 * and returns code unchanged. */
int ebb_errctx(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Forgets the calling thread's message and code (ebb_errmsg then reads
 * "success"). */
void ebb_clearerr(void);

#ifdef __cplusplus
}
#endif
#endif
