/* Worker processes, host side: spawning (posix_spawn, never fork: ebb may
 * have called cuInit), one request/answer at a time over the protocol's
 * socket, and supervision (a worker that dies, hangs or answers garbage is
 * reported with its pid and what happened; it is killed and reaped).
 *
 * The worker gets its end of a socketpair as fd 3 and the environment
 *   EBB_WORKER_FD=3          the protocol socket
 *   EBB_WORKER_PARENT=PID    the host's pid (for PR_SET_PDEATHSIG checks)
 * plus everything the host has (FAKEGPU_STATE, EBB_LIBCUDA, ...). It runs in
 * its own process group, so a terminal's Ctrl-C reaches only the host, which
 * cancels the job and stops its workers. Workers still alive at the host's
 * exit() are killed by an atexit handler; a host killed outright (SIGKILL) is
 * covered by the worker's PR_SET_PDEATHSIG (docs/worker-protocol.md). */
#ifndef EBB_WORKER_PROC_H
#define EBB_WORKER_PROC_H

#include <jansson.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "ebb/error.h"

typedef struct wrk_wproc wrk_wproc;

/* Starts exe with args (argv[1..nargs], may be NULL/0). label names the
 * worker in messages ("stage 'a'"); copied. *out owned by the caller: end it
 * with wrk_wproc_stop. */
int wrk_wproc_spawn(const char *exe, const char *const *args, size_t nargs, const char *label,
                    wrk_wproc **out);
pid_t wrk_wproc_pid(const wrk_wproc *w);
/* The prefix of /dev/shm names that belong to this worker ("ebb-w<host>-<pid>-"). */
const char *wrk_wproc_shm_prefix(const wrk_wproc *w);

/* Sends msg (borrowed) and waits for the answer: *reply (new reference) is
 * the first message whose type is not "heartbeat" or "log" ("log" messages
 * are written to ebb's log under the label). deadline: CLOCK_MONOTONIC
 * seconds (0: none). An answer of type "error" returns its code (its
 * "code" name, EBB_ESTAGE if unknown) with its message, and *reply set.
 * When the worker dies, hangs past the deadline, closes the socket or sends
 * garbage, the worker is killed and reaped and the error names the label,
 * the pid and what happened ("was killed by signal SIGSEGV (Segmentation
 * fault)", "did not answer within 5 s", "protocol error: ..."); after that
 * the worker is dead (wrk_wproc_alive answers 0). */
int wrk_wproc_call(wrk_wproc *w, const json_t *msg, double deadline, const atomic_int *cancel,
                   json_t **reply);
int wrk_wproc_alive(const wrk_wproc *w);
/* 1 and *status (a waitpid status) once the worker has been reaped (it died,
 * was killed or stopped), else 0. */
int wrk_wproc_reaped(const wrk_wproc *w, int *status);

/* Ends the worker: closes the socket (a worker exits when it reads EOF),
 * waits up to grace_s for it to exit, then SIGKILLs it; reaps it; unlinks
 * its shm leftovers; frees w. Ask it to exit first with wrk_wproc_call and
 * {"type": "exit"}. *how (may be NULL, 256 bytes) says how it ended
 * ("exited with status 0"). Returns 0 when it exited with status 0 on its
 * own. NULL: no-op. */
int wrk_wproc_stop(wrk_wproc *w, double grace_s, char *how);

/* How a reaped worker ended, short, for the release line's note:
 * "killed by SIGKILL", "exited with status 3". */
void wrk_wait_status_short(int status, char *buf, size_t n);
/* "SIGSEGV" for SIGSEGV. */
const char *wrk_signal_name(int sig);
/* "exited with status 3" / "was killed by signal SIGSEGV (Segmentation fault)". */
void wrk_wait_status_describe(int status, char *buf, size_t n);

#endif
