/* The read side of `ebb serve` under load: GET /healthz, /v1/memory and
 * /metrics, each hammered for 3 s by 32 keep-alive clients, side by side in
 * one run; prints requests/s, p99 latency and each path's throughput as a
 * ratio of /healthz's (issue 9 asks /v1/memory within 3x). Starts
 * BUILD/ebb serve itself (next to this program's directory) on a free
 * loopback port with a data directory of its own. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"

enum { CLIENTS = 32, MAXLAT = 1 << 20 };
static int port;
static const char *path;
static double until;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static double *lat;
static size_t nlat;

static int dial(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* One keep-alive GET; 0 when a whole answer (by Content-Length) came. */
static int get(int fd, const char *req, size_t rn) {
  static _Thread_local char buf[1 << 16];
  if (write(fd, req, rn) != (ssize_t)rn)
    return -1;
  size_t got = 0, want = 0;
  for (;;) {
    ssize_t k = read(fd, buf + got, sizeof buf - 1 - got);
    if (k <= 0)
      return -1;
    got += (size_t)k;
    buf[got] = '\0';
    char *end = strstr(buf, "\r\n\r\n");
    if (!end)
      continue;
    if (!want) {
      char *cl = strcasestr(buf, "Content-Length:");
      want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 15, NULL, 10) : 0);
    }
    if (got >= want)
      return 0;
  }
}

static void *client(void *arg) {
  (void)arg;
  char req[256];
  int rn = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
  int fd = dial();
  while (fd >= 0 && bench_now() < until) {
    double t0 = bench_now();
    if (get(fd, req, (size_t)rn) != 0) {
      close(fd);
      fd = dial();
      continue;
    }
    double t = bench_now() - t0;
    pthread_mutex_lock(&lock);
    if (nlat < MAXLAT)
      lat[nlat++] = t;
    pthread_mutex_unlock(&lock);
  }
  if (fd >= 0)
    close(fd);
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double measure(const char *p, double *p99) {
  path = p;
  nlat = 0;
  pthread_t th[CLIENTS];
  double t0 = bench_now();
  until = t0 + 3.0;
  for (int i = 0; i < CLIENTS; i++)
    pthread_create(&th[i], NULL, client, NULL);
  for (int i = 0; i < CLIENTS; i++)
    pthread_join(th[i], NULL);
  double secs = bench_now() - t0;
  qsort(lat, nlat, sizeof *lat, cmp);
  *p99 = nlat ? lat[nlat * 99 / 100] * 1e3 : 0;
  return (double)nlat / secs;
}

/* Starts ebb serve; its first stdout line names the port. */
static pid_t start(const char *ebb, const char *dir) {
  return bench_serve("server_readside", ebb, dir, &port);
}

int main(int argc, char **argv) {
  (void)argc;
  char ebb[4096], dir[] = "/tmp/ebb-bench-serve.XXXXXX";
  snprintf(ebb, sizeof ebb, "%s", argv[0]);
  char *slash = strrchr(ebb, '/');
  snprintf(slash ? slash : ebb, sizeof ebb - (size_t)(slash ? slash - ebb : 0), "%s",
           slash ? "/../ebb" : "../ebb");
  signal(SIGPIPE, SIG_IGN);
  if (!mkdtemp(dir) || !(lat = malloc(MAXLAT * sizeof *lat)))
    return 1;
  pid_t pid = start(ebb, dir);
  if (pid < 0)
    return 1;
  static const char *paths[] = {"/healthz", "/v1/memory", "/metrics"};
  double rate[3], p99[3];
  for (int i = 0; i < 3; i++)
    rate[i] = measure(paths[i], &p99[i]);
  printf("  %d keep-alive clients, 3 s each, one server\n", CLIENTS);
  for (int i = 0; i < 3; i++)
    printf("  GET %-11s %9.0f req/s  p99 %6.2f ms  /healthz is %.2fx its throughput\n",
           paths[i], rate[i], p99[i], rate[i] > 0 ? rate[0] / rate[i] : 0);
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf %s", dir);
  if (system(rm) != 0)
    fprintf(stderr, "server_readside: could not remove %s\n", dir);
  free(lat);
  return 0;
}
