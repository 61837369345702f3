/* ebb's error codes: 0 for success or a negative EBB_E... value, the same
 * in the embedding API (include/ebb/ebb.h, whose functions are in
 * include/ebb/error.h) and in the stage ABI (include/ebb/stage.h). A plugin
 * stage gets the codes from here and reports them with ebb_set_error(ctx,
 * ...): it links against nothing of ebb, so it sees no function here. */
#ifndef EBB_ERROR_CODES_H
#define EBB_ERROR_CODES_H

/* The one table of error codes. Columns:
 *   X(name, value, exit, http, wire, default message)
 * exit: the status `ebb` exits with when a command ends on this code before
 *   any stage ran (0 ok, 1 the job failed, 2 bad usage or bad input);
 * http: the status the server answers with; wire: the "code" of the
 *   server's error JSON {"error": {"code": wire, "message": ...}}. */
#define EBB_ERRORS(X)                                              \
  X(EBB_OK, 0, 0, 200, "ok", "success")                            \
  X(EBB_EINVAL, -1, 2, 400, "bad_request", "invalid argument")     \
  X(EBB_ENOMEM, -2, 1, 500, "internal", "out of host memory")      \
  X(EBB_EOOM, -3, 1, 503, "out_of_memory", "out of device memory") \
  X(EBB_ENODEV, -4, 2, 500, "internal", "no such device")          \
  X(EBB_EDRIVER, -5, 1, 500, "internal", "GPU driver error")       \
  X(EBB_ENOTFOUND, -6, 2, 404, "not_found", "not found")           \
  X(EBB_EIO, -7, 1, 500, "internal", "input/output error")         \
  X(EBB_ECONFIG, -8, 2, 400, "bad_request", "bad configuration")   \
  X(EBB_EINPUT, -9, 2, 400, "bad_request", "bad input")            \
  X(EBB_ECANCELED, -10, 1, 500, "internal", "canceled")            \
  X(EBB_ETIMEDOUT, -11, 1, 500, "internal", "timed out")           \
  X(EBB_EQUOTA, -12, 1, 503, "out_of_memory", "over quota")        \
  X(EBB_EABI, -13, 2, 500, "internal", "ABI mismatch")             \
  X(EBB_EBUSY, -14, 1, 409, "conflict", "busy")                    \
  X(EBB_ESTATE, -15, 1, 409, "conflict", "invalid state")          \
  X(EBB_EUNSUPPORTED, -16, 2, 400, "bad_request", "not supported") \
  X(EBB_ESTAGE, -17, 1, 500, "internal", "stage failed")           \
  X(EBB_EPROTO, -18, 1, 500, "internal", "protocol error")         \
  X(EBB_ENOLIB, -19, 2, 500, "internal", "library not found")

enum {
#define EBB_ERROR_ENUM_(name, value, exit, http, wire, msg) name = value,
  EBB_ERRORS(EBB_ERROR_ENUM_)
#undef EBB_ERROR_ENUM_
};

#endif
