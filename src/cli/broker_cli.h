/* What `ebb serve` (cmd_serve_broker.c) and `ebb reclaim` (cmd_reclaim.c)
 * share of the broker (docs/broker.md). */
#ifndef EBB_CLI_BROKER_CLI_H
#define EBB_CLI_BROKER_CLI_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

struct pl_manager;
struct dev_device;
typedef struct brk_peer brk_peer;

/* The UUID ("GPU-...") of CUDA device ordinal (cuInit, no context); 0 or
 * an EBB_E code with a message. */
int cli_cuda_uuid(int ordinal, char *uuid, size_t len);
/* "8G", "512MiB", "1048576" (bytes), "4 GiB"; 0 or -1. */
int cli_parse_bytes(const char *v, uint64_t *out);

/* ebb serve's broker options (--broker-dir, --broker-group,
 * --broker-timeout, --reserve). */
typedef struct serve_broker_opts {
  const char *dir, *group;
  double timeout_s;
  uint64_t reserve;
  int token;     /* the server has a token: its asks carry BRK_BY_TOKEN, and it
                    gives nothing to an ask made for anyone (docs/broker.md) */
  double wait_s; /* how long an ask waits for what the peers committed:
                    --job-timeout, else 60 s */
} serve_broker_opts;
/* Registers this server (when it serves a CUDA device) and answers peers
 * with pl_manager_give_back. *out NULL when nothing was registered (a
 * warning says why). */
void cli_serve_broker_start(const serve_broker_opts *o, struct pl_manager **ms,
                            struct dev_device **devs, size_t n, brk_peer **out);
void cli_serve_broker_stop(brk_peer *p);
/* pl_manager_opts.ask_peers: asks the peers on dev until need bytes are
 * free there (docs/broker.md), logging who gave what. */
int cli_serve_broker_ask(void *arg, struct dev_device *dev, uint64_t need);
/* pl_manager_opts.ask_done: the ask's claim on dev goes. */
void cli_serve_broker_ask_done(void *arg, struct dev_device *dev);
/* Every grant and refusal of the broker in ebb serve goes through
 * cli_serve_broker_fact, which logs it (the `[broker] pid P (WHAT) gave back
 * N MiB on cuda:K in T ms: REASON` line) and counts it for /metrics: the one
 * place to publish broker facts from (the event bus, /v1/events). */
typedef enum {
  EBB_BROKER_GAVE = 1, /* this server gave bytes to an asker (asker: its pid) */
  EBB_BROKER_REFUSED,  /* this server refused an asker (credentials, malformed) */
  EBB_BROKER_RECEIVED, /* a peer gave bytes to this server's ask */
  EBB_BROKER_SKIPPED,  /* a peer did not answer this server's ask, or refused it */
  EBB_BROKER_KEPT,     /* what a peer keeps and why, when the ask fell short */
  EBB_BROKER_ASKED,    /* an ask of this server ended (satisfied or not) */
} cli_broker_fact_kind;
typedef struct cli_broker_fact {
  int kind;
  long pid;           /* the giver (GAVE: this process), the peer, or the asker */
  const char *what;   /* "ebb serve", a kept item ("pipeline P") */
  const char *device; /* "cuda:0" */
  uint64_t bytes;     /* given / received / kept / needed (ASKED) */
  double ms;
  const char *reason;  /* what went, why skipped/refused/kept */
  long asker;          /* GAVE: the asker's pid as it said */
  uint64_t free_after; /* ASKED */
  size_t npeers;       /* ASKED */
  int satisfied;       /* ASKED */
} cli_broker_fact;

/* srv_opts.broker_reclaim (POST /v1/memory/reclaim) and
 * .broker_metrics (the ebb_broker_* families). */
int cli_serve_broker_reclaim(void *arg, const char *device, uint64_t bytes, json_t **answer);
void cli_serve_broker_metrics(void *arg, FILE *f);

#endif
