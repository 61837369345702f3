/* The broker room (docs/broker.md): processes sharing a GPU ask each other
 * for device memory. It sits just above base: the protocol codec, the peer
 * directory, the listener a giving process runs and the asking side, used
 * by `ebb serve` (giving and asking), `ebb reclaim` and libebb. It knows
 * nothing of pipelines or devices: the giver's rules come in as a callback
 * (the pipeline manager's pl_manager_give_back), the driver's free figure
 * as another (the caller's device room).
 *
 * Names: brk_ for what other rooms call; everything else is static. */
#ifndef EBB_BROKER_BROKER_H
#define EBB_BROKER_BROKER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BRK_VERSION 2      /* 2: "by" on reclaim, the commit line (docs/broker.md) */
#define BRK_MAX_LINE 65536 /* one message, newline included */
#define BRK_MAX_DEVICES 16
#define BRK_MAX_KEPT 32

/* --- codec.c: the messages, one JSON object a line ------------------------ */
typedef enum { BRK_OP_INFO = 1, BRK_OP_RECLAIM = 2 } brk_op;
/* Whose authority a reclaim carries (docs/broker.md, "Who may ask"):
 * "anyone" (a server without a token acting for whoever called it),
 * "token" (a token-protected server acting for a caller that proved a
 * token), "operator" (a process asking for itself: `ebb reclaim`,
 * ebb_reclaim()). */
typedef enum { BRK_BY_ANYONE = 1, BRK_BY_TOKEN = 2, BRK_BY_OPERATOR = 3 } brk_by;

typedef struct brk_request {
  int op;
  char device[64]; /* reclaim: the device UUID ("GPU-...") */
  uint64_t bytes;  /* reclaim: how many the asker wants */
  int64_t asker;   /* reclaim: the asker's pid (as it says; the socket's is checked) */
  int by;          /* reclaim: brk_by */
  /* Not on the wire: the connection's credentials (SO_PEERCRED), set by
   * the peer before the giver sees the request. */
  uid_t cred_uid;
  gid_t cred_gid;
  pid_t cred_pid;
} brk_request;

typedef struct brk_kept {
  char what[128]; /* "pipeline P", "reserve", "context" */
  uint64_t bytes;
  char why[160];
} brk_kept;

typedef struct brk_device_info {
  char uuid[64];
  char label[32];         /* "cuda:0" */
  uint64_t held_bytes;    /* what this process holds there, by the driver */
  uint64_t givable_bytes; /* what it could give now by its rules (an estimate) */
  double idle_s;          /* seconds since it last ran anything there */
} brk_device_info;

typedef struct brk_answer {
  int64_t pid;
  char what[96]; /* "ebb serve", "ebb serve, node b" */
  /* info */
  size_t ndevices;
  brk_device_info devices[BRK_MAX_DEVICES];
  /* reclaim */
  char device[64], label[32];
  uint64_t given_bytes; /* driver-confirmed: the drop of this process's usage */
  double ms;            /* the giving's time */
  char reason[512];     /* what went: "pipeline P asleep; cache trimmed" */
  size_t nkept;
  brk_kept kept[BRK_MAX_KEPT];
  /* reclaim, the first line (a commit): what the peer will give and how long
   * it expects to take; the final answer follows on the same connection */
  int commit;
  uint64_t commit_bytes;
  double eta_ms;
  int busy; /* reclaim: the peer could not look now (a load, another giving): ask again */
  /* error (any op): code "" when none */
  char err_code[32];
  char err_msg[256];
} brk_answer;

/* Encoders write one line (newline included) into buf (len bytes); they
 * answer the length, or a negative EBB_E code when it does not fit. */
int brk_encode_request(const brk_request *r, char *buf, size_t len);
int brk_encode_answer(int op, const brk_answer *a, char *buf, size_t len);
/* The commit line of a reclaim: a's pid, what, device, label, commit_bytes
 * and eta_ms. */
int brk_encode_commit(const brk_answer *a, char *buf, size_t len);
/* Decoders take one line (with or without its newline). EBB_EPROTO with a
 * message naming the field on anything malformed; a version other than
 * BRK_VERSION is EBB_EPROTO too ("version N, this side speaks 1"). */
int brk_decode_request(const char *line, brk_request *out);
int brk_decode_answer(int op, const char *line, brk_answer *out);
/* For BRK_OP_RECLAIM, a commit line decodes with out->commit set (the
 * final answer follows it). */

/* --- dir.c: the broker directory ------------------------------------------ */
/* The directory: dir when given, else $XDG_RUNTIME_DIR/ebb, else /run/ebb.
 * Created mode 0700, or 2770 owned by group when group is given (the
 * processes of several users). An existing directory must be ours (or
 * root's) and not writable by others. Writes the path into out. */
int brk_dir_open(const char *dir, const char *group, char *out, size_t outlen);
/* The gid of group ((gid_t)-1 for NULL); EBB_EINVAL naming it when unknown. */
int brk_dir_group(const char *group, gid_t *gid);
/* DIR/PID.sock */
void brk_sock_path(const char *dir, pid_t pid, char *out, size_t outlen);
/* The pids of the sockets in dir (not ours), up to cap; *n how many. The
 * entries of dead peers (pid gone) are removed on the way. */
int brk_dir_peers(const char *dir, pid_t *pids, size_t cap, size_t *n);

/* Opens a file of the directory only when it is a regular file (lstat,
 * then O_NONBLOCK | O_NOFOLLOW and fstat: no FIFO, device or link) of at
 * most max bytes; -1 otherwise (junk is logged once: brk_junk). */
struct stat;
int brk_open_file(const char *path, int flags, size_t max, struct stat *st);
/* Logs "ignoring PATH in the broker directory: WHY" once per file. */
void brk_junk(const char *path, const struct stat *st, const char *why);

/* --- claim.c: askers' claims on freed bytes (docs/broker.md, "Claims") ----- */
#define BRK_MAX_CLAIMS 8
#define BRK_MAX_HOLD_S 3600 /* the longest a claim stands (`ebb reclaim --hold`) */
#define BRK_MAX_HOLD_STR "3600"
/* A process's device bytes by the driver (the holder of a claim). */
typedef int (*brk_used_fn)(void *arg, pid_t pid, uint64_t *bytes);
typedef struct brk_claims_opts {
  const char *dir, *uuid;
  pid_t holder;        /* who will allocate the bytes */
  uint64_t bytes;      /* the claim */
  double hold_s;       /* it ends after this at most; <= 0: 10 s */
  brk_used_fn used_fn; /* the holder's usage: a claim ends when it has grown by
                          its bytes. NULL: only release, expiry or death end it */
  void *used_arg;
} brk_claims_opts;
typedef struct brk_claim_seen {
  pid_t holder;
  uint64_t bytes; /* not yet allocated */
} brk_claim_seen;
typedef struct brk_claims_seen {
  uint64_t bytes;  /* summed over the claims on the device */
  size_t total, n; /* claims counted; the first n in claims */
  brk_claim_seen claims[BRK_MAX_CLAIMS];
} brk_claims_seen;
typedef struct brk_claim_handle {
  uint64_t seq;   /* 0: none */
  char path[600]; /* "" once released */
} brk_claim_handle;
/* Records o's claim (DIR/claim.SEQ, in order under DIR/claims.lock) and
 * answers the claims before it on o->uuid that have not landed yet. */
int brk_claim_open(const brk_claims_opts *o, brk_claim_handle *h, brk_claims_seen *earlier);
/* The claims on o->uuid with a sequence number below seq (0: all) that
 * have not landed; ended ones (expired, holder gone, landed) are removed,
 * and with seq, o->holder's own earlier ones (superseded by its new claim:
 * a holder that frees before anyone saw its allocation land asks again). */
int brk_claims_before(const brk_claims_opts *o, uint64_t seq, brk_claims_seen *out);
/* Removes the claim (NULL or released: no-op). */
void brk_claim_release(brk_claim_handle *h);

/* --- peer.c: the giving side ----------------------------------------------- */
/* A reclaim in progress on the peer: the giver calls brk_commit once it
 * knows what it will give (before the work), so the asker hears at once. */
typedef struct brk_giving brk_giving;
/* Sends the commit line (ans's device and label, bytes, eta_ms) now; at
 * most once. g NULL (info, or a giver called without a connection): no-op. */
void brk_commit(brk_giving *g, const brk_answer *ans, uint64_t bytes, double eta_ms);
/* The giver's rules, called on a connection thread for each request (two
 * reclaims at once are not: the second is answered "busy" at once). For
 * BRK_OP_INFO fill ans->devices; for BRK_OP_RECLAIM commit (brk_commit),
 * then give back up to req->bytes on req->device and fill given_bytes,
 * reason, kept. Return 0, or an EBB_E code with ebb_errmsg() set (sent as
 * the answer's error; a code the giver put in ans->err_code is kept). */
typedef int (*brk_give_fn)(void *arg, const brk_request *req, brk_answer *ans, brk_giving *g);

typedef struct brk_peer brk_peer;
typedef struct brk_peer_opts {
  uint32_t size;
  const char *dir;  /* the broker directory (brk_dir_open's) */
  const char *what; /* "ebb serve": copied into every answer */
  gid_t group;      /* a peer of another user must be in it; (gid_t)-1: none */
  brk_give_fn give;
  void *give_arg;
  /* An asker refused (credentials, malformed, another version): its pid (0
   * when unknown) and why; called on a connection thread. May be NULL. */
  void (*refused)(void *arg, long pid, const char *why);
} brk_peer_opts;
/* Binds DIR/PID.sock (mode 0600, 0660 with a group) and starts the
 * listener thread; each connection is served on a thread of its own
 * (BRK_MAX_CONNS at once; beyond, an error answer at once), reading its
 * request within BRK_READ_MS in all. *out freed with brk_peer_stop. */
#define BRK_MAX_CONNS 16
#define BRK_READ_MS 1000
int brk_peer_start(const brk_peer_opts *o, brk_peer **out);
/* Stops the listener, waits for the connections being served, removes the
 * socket. NULL: no-op. */
void brk_peer_stop(brk_peer *p);
/* Requests answered, refused (credentials, malformed), bytes given. */
typedef struct brk_peer_stats {
  uint64_t requests, refused, given_bytes;
} brk_peer_stats;
void brk_peer_stats_get(brk_peer *p, brk_peer_stats *out);

/* --- client.c: conversations with peers, many at once ------------------------ */
/* One request to the peer with pid over DIR/PID.sock, waiting at most
 * timeout_s for the answer (a reclaim: for its commit, then its final
 * answer). EBB_ETIMEDOUT when it is silent; EBB_EIO when the socket refuses
 * (then the dead entry is removed). */
int brk_ask(const char *dir, pid_t pid, const brk_request *req, double timeout_s, brk_answer *out);

/* The driver's free bytes on the device (the caller's device room). */
typedef int (*brk_free_fn)(void *arg, uint64_t *free_bytes);

typedef struct brk_result_peer {
  pid_t pid;
  int status;      /* 0 answered, else the EBB_E code (skipped) */
  int committed;   /* it answered a commit line: */
  uint64_t commit; /*   what it would give */
  double eta_ms;   /*   and how long it expected to take */
  brk_answer ans;  /* the final answer; ans.err_msg says why when skipped */
} brk_result_peer;

/* Conversations (client.c), run side by side by poll: each connects,
 * checks the peer's credentials, sends its request and reads its answer
 * lines, bounded by its first deadline until the first line (the info
 * answer, or a reclaim's commit) and by the caller's until the last. */
typedef struct brk_conv brk_conv;
brk_conv *brk_conv_new(const char *dir, pid_t pid, const brk_request *req, double first_s,
                       brk_result_peer *out);
void brk_conv_free(brk_conv *c);
/* Runs until every conversation is done, or (firsts_by > 0) none waits for
 * its first line or firsts_by passed, or until passed (then the open ones
 * are cut: a committed one "had not given"), or stop(arg) answers 1
 * (checked every 50 ms; the open ones are left to the caller). Times are
 * brk_now()'s. */
void brk_convs_run(brk_conv **cs, size_t n, double firsts_by, double until, int (*stop)(void *),
                   void *arg);
/* 1 while the conversation is open; its result is in the brk_result_peer. */
int brk_conv_open(const brk_conv *c);
/* Closes an open conversation, marking its result with why. */
void brk_conv_cut(brk_conv *c, int status, const char *why);
double brk_now(void);

/* --- reclaim.c: the whole reclaim -------------------------------------------- */
typedef struct brk_reclaim_opts {
  uint32_t size;
  const char *dir;
  const char *uuid;    /* the device */
  uint64_t bytes;      /* wanted free on it */
  double timeout_s;    /* per peer (--broker-timeout); <= 0: 2 s */
  double wait_s;       /* the asker's own deadline: for committed gives and the
                          driver to show the bytes free; <= 0: 5 s */
  int by;              /* whose authority (brk_by); 0: BRK_BY_OPERATOR */
  brk_free_fn free_fn; /* may be NULL: no driver figure, given bytes count */
  void *free_arg;
  /* The claim (claim.c): recorded before the free memory is read, so a later
   * asker counts these bytes as taken until holder's allocation lands. */
  pid_t holder;        /* who will allocate; 0: this process */
  double hold_s;       /* the claim ends after this at most; <= 0: 10 s */
  brk_used_fn used_fn; /* a process's driver usage; may be NULL */
  void *used_arg;
} brk_reclaim_opts;

typedef struct brk_reclaim_result {
  uint64_t free_before, free_after; /* by free_fn (0 without it) */
  uint64_t given_bytes;             /* summed over the peers */
  brk_claims_seen earlier;          /* other askers' claims counted as taken (at the start) */
  uint64_t claimed_after;           /* of them, still not allocated at the end */
  brk_claim_handle claim;           /* this asker's (brk_claim_release; not by _free) */
  int satisfied;                    /* free_after >= bytes (or given >= asked) */
  size_t npeers;                    /* entries in peers (heap; brk_reclaim_free) */
  brk_result_peer *peers;
} brk_reclaim_result;
/* Records this asker's claim, then asks the peers on the device for what
 * is missing (bytes - (free - earlier claims)), all at once: each peer
 * (most idle first) for its share by what it says it could give, the
 * others when the commits fall short; then waits, within wait_s, for the
 * committed gives and for the driver to show the bytes free beyond the
 * earlier claims. 0 when it ran (see satisfied), else an EBB_E
 * code. The claim stays (out->claim) until brk_claim_release, its holder's
 * allocation lands, it expires or its holder dies; without free_fn no
 * claim is made. */
int brk_reclaim(const brk_reclaim_opts *o, brk_reclaim_result *out);
void brk_reclaim_free(brk_reclaim_result *r);

#endif
