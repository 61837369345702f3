/* Many nodes on one Redis (`ebb serve --queue redis://HOST:PORT[/DB]`,
 * docs/scale-out.md). Every node is a consumer in one consumer group;
 * POST /v1/jobs on any node adds the job to its pipeline's stream
 * (PREFIX:stream:PIPELINE) and writes its hash (PREFIX:job:UID); any node
 * answers GET /v1/jobs/ID from that hash. A node takes a job only when it
 * can place it now, pipelines it has loaded first; it renews a lease while
 * the job runs, and a node whose lease lapsed (it died) has its entry
 * claimed by another (XAUTOCLAIM). The result write is a Lua script that
 * checks the attempt number, so a job completes at most once.
 *
 * Without --queue none of this runs: SQLite (store.h) and queue.h serve one
 * node as before. */
#ifndef EBB_SERVER_CLUSTER_H
#define EBB_SERVER_CLUSTER_H

#include <stddef.h>

typedef struct srv_cluster_opts {
  const char *url;        /* redis://[:PASSWORD@]HOST:PORT[/DB] */
  const char *prefix;     /* key prefix; NULL: "ebb" */
  const char *password;   /* AUTH; NULL: the URL's, else none */
  const char *shared_dir; /* every node mounts it; NULL: none (large inputs refused) */
  const char *node_id;    /* NULL: HOSTNAME-PID */
  size_t inline_max;      /* inputs/outputs up to this travel in Redis; 0: 16 MiB */
  double lease_s;         /* a running job's lease; 0: 15 s */
  int max_attempts;       /* 0: 3 */
} srv_cluster_opts;

/* Parses the URL: 0, or EBB_EINVAL with a message naming what was wrong. */
int srv_cluster_parse_url(const char *url, char *host, size_t hn, int *port, int *db,
                          char *password, size_t pn);

#endif
