/* The worker protocol's wire format (docs/worker-protocol.md): frames of a
 * 4-byte little-endian length followed by that many bytes of UTF-8 JSON (one
 * object with a string "type"), over a Unix stream socket; bulk payloads
 * (float PCM, tensors) travel in shared-memory files under /dev/shm whose
 * names are sent in the JSON.
 *
 * Both ends use these: the host (src/worker/proc.c, src/pipeline/isolated.c)
 * and ebb-worker (src/cli/worker_main.c). */
#ifndef EBB_WORKER_WIRE_H
#define EBB_WORKER_WIRE_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ebb/error.h"

#define EBB_WORKER_PROTOCOL 1
/* Largest JSON body either side accepts (payloads go through shm). */
#define EBB_WIRE_MAX_FRAME (16u << 20)

/* Decodes one frame from buf[0..n). Returns 0 with *msg (new reference, a
 * JSON object with a string "type") and *used (bytes consumed); 0 with *msg
 * NULL and *used 0 when buf holds only part of a frame; EBB_EPROTO when the
 * frame is invalid (length 0 or over max, not UTF-8 JSON, not an object, no
 * "type"), with a message saying which. max 0: EBB_WIRE_MAX_FRAME. */
int wrk_wire_decode(const void *buf, size_t n, size_t max, json_t **msg, size_t *used);
/* Encodes msg into a new frame: *out (malloc'd, caller frees), *n bytes. */
int wrk_wire_encode(const json_t *msg, unsigned char **out, size_t *n);

/* Writes one frame (all of it; EPIPE is EBB_EIO, SIGPIPE is not raised). */
int wrk_wire_send(int fd, const json_t *msg);
/* Reads one frame. deadline: CLOCK_MONOTONIC seconds (0: none) ->
 * EBB_ETIMEDOUT; cancel (may be NULL) nonzero -> EBB_ECANCELED; the peer
 * closing between frames -> EBB_EIO ("closed the connection"); closing in
 * the middle of a frame or a bad frame -> EBB_EPROTO. *msg: new reference. */
int wrk_wire_recv(int fd, double deadline, const atomic_int *cancel, json_t **msg);

/* The hot path's reader: one per connection, kept across frames. It reads
 * ahead into its own buffer (what a recv brings beyond the current frame
 * stays for the next), so a small frame costs one recv and no allocation:
 * the body is parsed where it lies. With a deadline or a cancel flag it
 * waits in a blocking recv that wakes every 100 ms (SO_RCVTIMEO, set once
 * on the socket), not in a poll before each read; in the last 100 ms
 * before a deadline it polls for exactly what is left. A frame larger than
 * the buffer is read into a block of its own. With spin_us > 0 it first
 * polls the socket without sleeping for up to that long (a non-blocking recv
 * in a loop, yielding between tries; cancel and deadline still looked at): an answer that comes
 * within it costs no wake-up of a sleeping thread, which on a VM is most of
 * a small round trip (busy polling, as SO_BUSY_POLL does for NICs). */
#define EBB_WIRE_READER_BUF 65536
/* The spin's default and ceiling (EBB_WORKER_SPIN_US sets it; 0: off). */
#define EBB_WIRE_SPIN_US_DEFAULT 50
#define EBB_WIRE_SPIN_US_MAX 10000
typedef struct wrk_wire_reader {
  int fd;
  int timed;         /* SO_RCVTIMEO is set on fd */
  unsigned spin_us;  /* busy-poll this long before sleeping (0: never) */
  size_t start, end; /* unread bytes: buf[start..end) */
  unsigned char buf[EBB_WIRE_READER_BUF];
} wrk_wire_reader;
/* Starts a reader on fd (borrowed: the caller closes it), spin_us 0. */
void wrk_wire_reader_init(wrk_wire_reader *r, int fd);
/* The spin a reader should use: EBB_WORKER_SPIN_US if set (0 turns it off;
 * a value that is not a whole number of microseconds up to
 * EBB_WIRE_SPIN_US_MAX is an error, reported once in *bad if not NULL, and the
 * default is used), else EBB_WIRE_SPIN_US_DEFAULT. */
unsigned wrk_wire_spin_us(const char **bad);
/* wrk_wire_recv through the reader: same answers, same errors. */
int wrk_wire_read(wrk_wire_reader *r, double deadline, const atomic_int *cancel, json_t **msg);

/* --- shared memory ------------------------------------------------------ */
/* Creates /dev/shm/NAME (exclusive, mode 0600) holding a copy of data[0..n).
 * name: letters, digits, '-', '_', '.' only (EBB_EINVAL otherwise). */
int wrk_shm_put(const char *name, const void *data, size_t n);
/* Creates /dev/shm/NAME (exclusive, mode 0600) of n bytes (n > 0) and maps
 * it read-write into *p: a producer that builds its tensor or audio there
 * hands it to a worker by name, with no copy at all. Unmap with
 * wrk_shm_unmap(*p, n); the file stays until wrk_shm_unlink. */
int wrk_shm_create(const char *name, size_t n, void **p);
/* Gives the file /dev/shm/FROM a second name, /dev/shm/TO (a hard link:
 * the same bytes, no copy): a payload already in shared memory is handed to
 * a worker under a name with that worker's prefix. Unlink TO when done;
 * FROM is untouched. */
int wrk_shm_link(const char *from, const char *to);
/* Takes over /dev/shm/FROM, a peer's file, as /dev/shm/TO (a rename: the
 * peer can no longer reach it by name, and nothing is copied) and maps its
 * first n bytes (n > 0) read-write into *p. It must be a regular file of at
 * least n bytes (EBB_EPROTO otherwise, and TO is unlinked). Unmap with
 * wrk_shm_unmap(*p, n); unlink TO when done. */
int wrk_shm_take(const char *from, const char *to, size_t n, void **p);
/* Maps /dev/shm/NAME read-only; it must hold at least n bytes (EBB_EPROTO
 * otherwise). *p is unmapped with wrk_shm_unmap(*p, n). n 0: *p NULL. */
int wrk_shm_map(const char *name, size_t n, const void **p);
void wrk_shm_unmap(const void *p, size_t n);
/* Unlinks /dev/shm/NAME; missing is not an error. */
void wrk_shm_unlink(const char *name);
/* Unlinks every /dev/shm entry whose name starts with prefix (a worker's
 * leftovers after it died). Returns how many. */
int wrk_shm_unlink_prefix(const char *prefix);
/* 1 when name is a valid shm name for wrk_shm_put/map. */
int wrk_shm_name_ok(const char *name);

/* "EBB_EOOM" <-> code, for the error messages of the protocol. Unknown
 * names map to EBB_ESTAGE. */
int wrk_wire_code(const char *name);

#endif
