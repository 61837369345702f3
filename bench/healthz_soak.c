/* /healthz through a crowd of idle connections (issue 31, "Connections that
 * cannot starve the server"): SOCKETS sockets from ADDRS loopback addresses
 * (127.0.0.2, 127.0.0.3, ...) connect to `ebb serve` and send nothing; each
 * one the server closes reconnects at once, at most RATE reconnects a second
 * per address. Meanwhile a probe from 127.0.0.1 asks GET /healthz (a fresh
 * connection each time, Connection: close) PROBES times spread over SECONDS;
 * a probe that fails or takes longer than the probe timeout counts as
 * infinite. Prints p50/p99/max, failures, reconnects and what was still
 * connected at the end. Before the crowd connects, the same probe runs alone
 * for --base-seconds (default 10) at the same rate, and its
 * p50/p99 are printed side by side: on a shared machine the probe's tail is
 * often the machine's, and the baseline shows how much.
 *
 *   healthz_soak [--port P] [--sockets 3000] [--addrs 19] [--seconds 60]
 *                [--probes 1000] [--rate 50] [--timeout-ms 2000]
 *                [--base-seconds 10] [--max-p99-ms MS] [--max-failed N]
 *
 * Without --port it starts BUILD/ebb serve (next to this program's
 * directory) on a free loopback port with the default limits and a data
 * directory of its own. Exit 0; 1 when --max-p99-ms or --max-failed is
 * given and not met (a test's short run uses that), 2 on bad usage. Loopback
 * only, bounded in time (SECONDS + the timeout) and in sockets. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

typedef struct cfg {
  int port, sockets, addrs, probes, rate, timeout_ms;
  double seconds, max_p99_ms, base_seconds;
  long max_failed;
} cfg;

typedef struct slot {
  int fd;       /* -1: waiting to reconnect */
  int addr;     /* 0..addrs-1: 127.0.0.(2+addr) */
  int connected;
} slot;

static cfg C = {.sockets = 3000, .addrs = 19, .probes = 1000, .rate = 50, .timeout_ms = 2000,
                .seconds = 60, .base_seconds = 10, .max_failed = -1};
static volatile int done;

/* --- the crowd --------------------------------------------------------------------- */
static int dial_from(int addr, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  int one = 1;
  setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
  struct sockaddr_in src = {.sin_family = AF_INET};
  src.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)addr);
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0 ||
      (connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0 && errno != EINPROGRESS)) {
    close(fd);
    return -1;
  }
  return fd;
}

typedef struct crowd {
  slot *s;
  int ep;
  double *tokens; /* per address: reconnects it may make now */
  double last_refill;
  unsigned long reconnects, failed_dials;
} crowd;

static void open_slot(crowd *cr, int i) {
  slot *sl = &cr->s[i];
  sl->fd = dial_from(sl->addr, C.port);
  sl->connected = 0;
  if (sl->fd < 0) {
    cr->failed_dials++;
    return;
  }
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.u32 = (uint32_t)i};
  epoll_ctl(cr->ep, EPOLL_CTL_ADD, sl->fd, &ev);
}

static void close_slot(crowd *cr, int i) {
  epoll_ctl(cr->ep, EPOLL_CTL_DEL, cr->s[i].fd, NULL);
  close(cr->s[i].fd);
  cr->s[i].fd = -1;
  cr->s[i].connected = 0;
}

static void on_event(crowd *cr, int i, uint32_t ev) {
  slot *sl = &cr->s[i];
  if (sl->fd < 0)
    return;
  char b[256];
  if (ev & (EPOLLERR | EPOLLHUP | EPOLLRDHUP | EPOLLIN)) {
    ssize_t k = recv(sl->fd, b, sizeof b, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN) || (ev & (EPOLLERR | EPOLLHUP))) {
      close_slot(cr, i); /* closed by the server: reconnect when the rate allows */
      return;
    }
  }
  if ((ev & EPOLLOUT) && !sl->connected) {
    sl->connected = 1;
    struct epoll_event e = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)i};
    epoll_ctl(cr->ep, EPOLL_CTL_MOD, sl->fd, &e);
  }
}

/* Reconnects what was closed, RATE a second per address at most. */
static void refill(crowd *cr) {
  double now = bench_now(), dt = now - cr->last_refill;
  cr->last_refill = now;
  for (int a = 0; a < C.addrs; a++) {
    cr->tokens[a] += dt * C.rate;
    if (cr->tokens[a] > C.rate / 10.0 + 1)
      cr->tokens[a] = C.rate / 10.0 + 1; /* bursts of 100 ms at most */
  }
  for (int i = 0; i < C.sockets; i++)
    if (cr->s[i].fd < 0 && cr->tokens[cr->s[i].addr] >= 1) {
      cr->tokens[cr->s[i].addr] -= 1;
      cr->reconnects++;
      open_slot(cr, i);
    }
}

static void *crowd_main(void *arg) {
  crowd *cr = arg;
  struct epoll_event evs[256];
  double next_refill = 0;
  while (!done) {
    int n = epoll_wait(cr->ep, evs, 256, 10);
    for (int k = 0; k < n; k++)
      on_event(cr, (int)evs[k].data.u32, evs[k].events);
    if (bench_now() >= next_refill) {
      refill(cr);
      next_refill = bench_now() + 0.01;
    }
  }
  return NULL;
}

/* --- the probe --------------------------------------------------------------------- */
/* One GET /healthz on a fresh connection: milliseconds, or INFINITY. */
static double probe(void) {
  double t0 = bench_now(), deadline = t0 + C.timeout_ms / 1e3;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)C.port)};
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0)
    return INFINITY;
  int ok = connect(fd, (struct sockaddr *)&dst, sizeof dst) == 0 || errno == EINPROGRESS;
  static const char req[] = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  size_t sent = 0, got = 0;
  char buf[1024];
  while (ok) {
    double left = deadline - bench_now();
    struct pollfd p = {.fd = fd, .events = sent < sizeof req - 1 ? POLLOUT : POLLIN};
    if (left <= 0 || poll(&p, 1, (int)(left * 1e3) + 1) <= 0) {
      ok = 0;
      break;
    }
    if (sent < sizeof req - 1) {
      ssize_t k = send(fd, req + sent, sizeof req - 1 - sent, MSG_NOSIGNAL);
      if (k < 0 && errno != EAGAIN)
        ok = 0;
      sent += k > 0 ? (size_t)k : 0;
      continue;
    }
    ssize_t k = recv(fd, buf + got, sizeof buf - 1 - got, 0);
    if (k < 0 && errno == EAGAIN)
      continue;
    if (k <= 0)
      break; /* the end of the answer (Connection: close) */
    got += (size_t)k;
    if (got == sizeof buf - 1)
      break;
  }
  close(fd);
  buf[got] = '\0';
  if (!ok || strncmp(buf, "HTTP/1.1 200", 12) || !strstr(buf, "\"ok\""))
    return INFINITY;
  return (bench_now() - t0) * 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* --- the server -------------------------------------------------------------------- */
static pid_t start_server(const char *argv0, char *dir) {
  char ebb[4096];
  snprintf(ebb, sizeof ebb, "%s", argv0);
  char *slash = strrchr(ebb, '/');
  snprintf(slash ? slash : ebb, sizeof ebb - (size_t)(slash ? slash - ebb : 0), "%s",
           slash ? "/../ebb" : "../ebb");
  if (!mkdtemp(dir))
    return -1;
  return bench_serve("healthz_soak", ebb, dir, &C.port);
}

static int parse(int argc, char **argv) {
  for (int i = 1; i < argc; i += 2) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v)
      return -1;
    if (!strcmp(a, "--port"))
      C.port = atoi(v);
    else if (!strcmp(a, "--sockets"))
      C.sockets = atoi(v);
    else if (!strcmp(a, "--addrs"))
      C.addrs = atoi(v);
    else if (!strcmp(a, "--seconds"))
      C.seconds = atof(v);
    else if (!strcmp(a, "--probes"))
      C.probes = atoi(v);
    else if (!strcmp(a, "--rate"))
      C.rate = atoi(v);
    else if (!strcmp(a, "--timeout-ms"))
      C.timeout_ms = atoi(v);
    else if (!strcmp(a, "--base-seconds"))
      C.base_seconds = atof(v);
    else if (!strcmp(a, "--max-p99-ms"))
      C.max_p99_ms = atof(v);
    else if (!strcmp(a, "--max-failed"))
      C.max_failed = atol(v);
    else
      return -1;
  }
  if (C.sockets < 0 || C.sockets > 60000 || C.addrs < 1 || C.addrs > 250 || C.probes < 1 ||
      C.probes > 1000000 || C.seconds <= 0 || C.seconds > 3600 || C.rate < 1 ||
      C.timeout_ms < 1 || C.base_seconds < 0 || C.base_seconds > 600)
    return -1;
  return 0;
}

/* Sorts lat; p50, p99 (a failure is infinite), max and the failures. */
typedef struct figures {
  double p50, p99, max;
  int failed;
} figures;

static figures figures_of(double *lat, int n) {
  qsort(lat, (size_t)n, sizeof *lat, cmp);
  figures f = {.p50 = lat[n / 2], .p99 = lat[(n * 99 + 99) / 100 - 1], .max = lat[n - 1]};
  for (int i = 0; i < n; i++)
    f.failed += isinf(lat[i]);
  return f;
}

/* n probes spread over secs seconds into lat. */
static void probe_run(double *lat, int n, double secs) {
  double t0 = bench_now(), gap = secs / n;
  for (int i = 0; i < n; i++) {
    double at = t0 + i * gap, now = bench_now();
    if (at > now)
      usleep((useconds_t)((at - now) * 1e6));
    lat[i] = probe();
  }
}

static int report(const figures *b, int nb, const figures *f, int n, const crowd *cr, int open,
                  double crowd_s) {
  printf("healthz_soak: %d sockets from %d addresses (127.0.0.2..), reconnect <= %d/s each, "
         "%.0f s\n", C.sockets, C.addrs, C.rate, C.seconds);
  if (nb)
    printf("  alone:      %4d probes, p50 %.2f ms, p99 %.2f ms, max %.2f ms, failed %d\n", nb,
           b->p50, b->p99, b->max, b->failed);
  printf("  with crowd: %4d probes, p50 %.2f ms, p99 %.2f ms, max %.2f ms, failed %d "
         "(timeout %d ms; a failure counts as infinite)\n", n, f->p50, f->p99, f->max,
         f->failed, C.timeout_ms);
  if (nb)
    printf("  p99 with the crowd / alone: %.2f\n", f->p99 / b->p99);
  printf("  reconnects %lu (%.1f/s per address), dials refused locally %lu, connected at the "
         "end %d of %d\n", cr->reconnects, cr->reconnects / crowd_s / C.addrs,
         cr->failed_dials, open, C.sockets);
  int bad = (C.max_p99_ms > 0 && !(f->p99 <= C.max_p99_ms)) ||
            (C.max_failed >= 0 && f->failed > C.max_failed);
  if (bad)
    printf("healthz_soak: FAIL: p99 %.2f ms (limit %.2f), %d failed (limit %ld)\n", f->p99,
           C.max_p99_ms, f->failed, C.max_failed);
  return bad;
}

int main(int argc, char **argv) {
  if (parse(argc, argv) != 0) {
    fprintf(stderr, "usage: healthz_soak [--port P] [--sockets N] [--addrs N] [--seconds S] "
                    "[--probes N] [--rate R] [--timeout-ms MS] [--max-p99-ms MS] "
                    "[--max-failed N]\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  char dir[] = "/tmp/ebb-healthz-soak.XXXXXX";
  pid_t pid = 0;
  if (!C.port && (pid = start_server(argv[0], dir)) < 0)
    return 1;
  crowd cr = {.s = calloc((size_t)C.sockets + 1, sizeof(slot)), .ep = epoll_create1(0),
              .tokens = calloc((size_t)C.addrs, sizeof(double)), .last_refill = bench_now()};
  double *lat = calloc((size_t)C.probes, sizeof *lat);
  if (!cr.s || cr.ep < 0 || !cr.tokens || !lat)
    return 1;
  int nb = C.base_seconds > 0 ? (int)(C.probes * C.base_seconds / C.seconds) + 1 : 0;
  double *base = calloc((size_t)nb + 1, sizeof *base);
  figures bf = {0};
  if (nb && base) {
    probe_run(base, nb, C.base_seconds);
    bf = figures_of(base, nb);
  }
  for (int i = 0; i < C.sockets; i++) {
    cr.s[i].addr = i % C.addrs;
    open_slot(&cr, i); /* the first connections are not rate-limited */
  }
  pthread_t th;
  double crowd_t0 = bench_now();
  pthread_create(&th, NULL, crowd_main, &cr);
  sleep(1); /* the crowd in place (and evicting) before the first probe */
  probe_run(lat, C.probes, C.seconds);
  done = 1;
  pthread_join(th, NULL);
  int open = 0;
  for (int i = 0; i < C.sockets; i++)
    open += cr.s[i].fd >= 0 && cr.s[i].connected;
  figures f = figures_of(lat, C.probes);
  int bad = report(&bf, nb, &f, C.probes, &cr, open, bench_now() - crowd_t0);
  free(base);
  for (int i = 0; i < C.sockets; i++)
    if (cr.s[i].fd >= 0)
      close(cr.s[i].fd);
  if (pid > 0) {
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
      fprintf(stderr, "healthz_soak: could not remove %s\n", dir);
  }
  free(lat);
  free(cr.s);
  free(cr.tokens);
  return bad;
}
