/* What GET /v1/events costs a job: the run time of the same job (a synthetic
 * pipeline that allocates and touches device memory) with 200 clients
 * reading /v1/events and with none, side by side in one run (no clients,
 * 200 clients, no clients again, so drift shows). Prints the ratio of the
 * medians; the target is < 1.05.
 *
 * It starts `ebb serve` (BUILD/ebb next to BUILD/bench/, or $EBB) on a free
 * loopback port with the environment scripts/bench.sh set (the fake GPU),
 * reads the job times the server records (finished - started, no queueing),
 * and drains the 200 streams from one thread with poll(). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define NCLIENTS 200
#define JOBS 7 /* per phase */

static int port;

static int dial(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  return fd;
}

/* One request; returns the body (malloc'd) or NULL. */
static char *http(const char *method, const char *path, const char *body) {
  int fd = dial();
  if (fd < 0) {
    fprintf(stderr, "events_clients: cannot connect to 127.0.0.1:%d: %s\n", port, strerror(errno));
    return NULL;
  }
  char req[2048];
  int n = snprintf(req, sizeof req,
                   "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: "
                   "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                   method, path, body ? strlen(body) : 0, body ? body : "");
  if (write(fd, req, (size_t)n) != n) {
    close(fd);
    return NULL;
  }
  size_t cap = 65536, len = 0;
  char *buf = malloc(cap);
  ssize_t r;
  while (buf && (r = read(fd, buf + len, cap - len - 1)) > 0) {
    len += (size_t)r;
    if (len + 1 == cap) {
      char *nb = realloc(buf, cap *= 2);
      if (!nb) {
        free(buf);
        buf = NULL;
      }
      buf = nb;
    }
  }
  close(fd);
  if (!buf)
    return NULL;
  buf[len] = '\0';
  char *b = strstr(buf, "\r\n\r\n");
  char *out = b ? strdup(b + 4) : NULL;
  free(buf);
  return out;
}

/* Runs one job to its end; its run time as the server measured it, or -1. */
static double run_job(const char *input) {
  char body[1024];
  snprintf(body, sizeof body, "{\"pipeline\": \"bench\", \"input\": \"%s\"}", input);
  char *t = http("POST", "/v1/jobs", body);
  json_t *o = t ? json_loads(t, 0, NULL) : NULL;
  if (!json_object_get(o, "id"))
    fprintf(stderr, "events_clients: POST /v1/jobs answered: %s\n", t ? t : "nothing");
  free(t);
  const char *id = json_string_value(json_object_get(o, "id"));
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id ? id : "0");
  json_decref(o);
  for (int i = 0; i < 3000; i++) { /* bounded: 5 minutes */
    t = http("GET", path, NULL);
    o = t ? json_loads(t, 0, NULL) : NULL;
    free(t);
    const char *st = json_string_value(json_object_get(o, "state"));
    if (st && !strcmp(st, "succeeded")) {
      double d = json_number_value(json_object_get(o, "finished")) -
                 json_number_value(json_object_get(o, "started"));
      json_decref(o);
      return d;
    }
    if (!st || (strcmp(st, "queued") && strcmp(st, "running"))) {
      fprintf(stderr, "events_clients: job %s ended %s\n", path, st ? st : "(no answer)");

      json_decref(o);
      return -1;
    }
    json_decref(o);
    usleep(100 * 1000);
  }
  return -1;
}

/* --- the 200 readers ------------------------------------------------------------ */
static int fds[NCLIENTS];
static unsigned long got[NCLIENTS];
static atomic_int stop_readers;

static void *readers(void *arg) {
  (void)arg;
  struct pollfd p[NCLIENTS];
  char buf[65536];
  while (!atomic_load(&stop_readers)) {
    for (int i = 0; i < NCLIENTS; i++)
      p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    if (poll(p, NCLIENTS, 200) <= 0)
      continue;
    for (int i = 0; i < NCLIENTS; i++)
      if (p[i].revents & (POLLIN | POLLHUP)) {
        ssize_t r = read(fds[i], buf, sizeof buf);
        if (r > 0)
          got[i] += (unsigned long)r;
        else
          fds[i] = -1; /* closed: poll ignores negative fds */
      }
  }
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int phase(const char *input, double *out) {
  for (int i = 0; i < JOBS; i++)
    if ((out[i] = run_job(input)) < 0)
      return -1;
  return 0;
}

int main(int argc, char **argv) {
  (void)argc;
  char ebb[PATH_MAX], dir[] = "/tmp/ebb-bench-events.XXXXXX";
  const char *env = getenv("EBB");
  if (env)
    snprintf(ebb, sizeof ebb, "%s", env);
  else {
    char self[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, PATH_MAX - 1);
    self[n > 0 ? n : 0] = '\0';
    char *s = strrchr(self, '/');
    if (s)
      strcpy(s, "/../ebb");
    snprintf(ebb, sizeof ebb, "%.*s", (int)(sizeof ebb - 1), self);
  }
  (void)argv;
  if (!mkdtemp(dir)) {
    perror("events_clients: mkdtemp");
    return 1;
  }
  char cfg[512], input[512], data[512];
  snprintf(cfg, sizeof cfg, "%s/cfg.json", dir);
  snprintf(input, sizeof input, "%s/input.txt", dir);
  snprintf(data, sizeof data, "%s/data", dir);
  FILE *f = fopen(cfg, "w");
  fprintf(f, "{\"pipelines\": {\"bench\": {\"stages\": ["
             "{\"stage\": \"synthetic\", \"name\": \"a\", \"options\": {\"weights_mib\": 256, "
             "\"activations_mib\": 128}},"
             "{\"stage\": \"synthetic\", \"name\": \"b\", \"options\": {\"weights_mib\": 384, "
             "\"activations_mib\": 128}}]}},"
             /* all 200 clients come from 127.0.0.1 (default: 64 per address) */
             "\"server\": {\"max_connections_per_ip\": 256}}\n");
  fclose(f);
  f = fopen(input, "w");
  fputs("bench input\n", f);
  fclose(f);

  char logp[512];
  snprintf(logp, sizeof logp, "%s/serve.log", dir);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  char *args[] = {ebb,           "serve", "--config",    cfg, "--listen", "127.0.0.1:0",
                  "--data-dir",  data,    "--input-dir", dir, "--no-cache", NULL};
  pid_t pid;
  if (posix_spawn(&pid, ebb, &fa, NULL, args, environ) != 0) {
    fprintf(stderr, "events_clients: cannot start %s\n", ebb);
    return 1;
  }
  posix_spawn_file_actions_destroy(&fa);
  char line[512] = "";
  for (int i = 0; i < 100 && !strstr(line, "listening on http://127.0.0.1:"); i++) {
    usleep(100 * 1000);
    FILE *lf = fopen(logp, "r");
    if (lf && !fgets(line, sizeof line, lf))
      line[0] = '\0';
    if (lf)
      fclose(lf);
  }
  if (!strstr(line, "listening on http://127.0.0.1:")) {
    fprintf(stderr, "events_clients: %s serve did not say where it listens (see %s)\n", ebb, logp);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    return 1;
  }
  port = atoi(strrchr(line, ':') + 1);

  int rc = 0;
  double a1[JOBS], b[JOBS], a2[JOBS];
  run_job(input); /* warm up: first load, files cached */
  if (phase(input, a1)) {
    rc = 1;
    goto done;
  }
  for (int i = 0; i < NCLIENTS; i++) {
    fds[i] = dial();
    const char *req = "GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n";
    if (fds[i] < 0 || write(fds[i], req, strlen(req)) != (ssize_t)strlen(req)) {
      fprintf(stderr, "events_clients: client %d could not connect\n", i);
      rc = 1;
      goto done;
    }
  }
  pthread_t th;
  pthread_create(&th, NULL, readers, NULL);
  usleep(1500 * 1000);
  int reading = 0;
  for (int i = 0; i < NCLIENTS; i++)
    reading += got[i] > 0 && fds[i] >= 0;
  if (phase(input, b))
    rc = 1;
  int still = 0;
  unsigned long bytes = 0;
  for (int i = 0; i < NCLIENTS; i++) {
    still += fds[i] >= 0;
    bytes += got[i];
  }
  atomic_store(&stop_readers, 1);
  pthread_join(th, NULL);
  for (int i = 0; i < NCLIENTS; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  if (rc || phase(input, a2)) {
    rc = 1;
    goto done;
  }
  double none[2 * JOBS];
  memcpy(none, a1, sizeof a1);
  memcpy(none + JOBS, a2, sizeof a2);
  double m0 = median(none, 2 * JOBS), m1 = median(b, JOBS);
  printf("events_clients: %d clients on /v1/events (%d streaming at start, %d at the end, "
         "%lu bytes read)\n", NCLIENTS, reading, still, bytes);
  double ma1 = median(a1, JOBS), ma2 = median(a2, JOBS);
  printf("  job run time, median of %d jobs: %.3f s without clients, %.3f s with %d\n", 2 * JOBS,
         m0, m1, NCLIENTS);
  printf("  (without, before: %.3f s; without, after: %.3f s: the noise of this machine)\n",
         ma1, ma2);
  printf("  ratio with/without: %.3f (target < 1.05)\n", m1 / m0);
  if (reading < NCLIENTS)
    printf("  note: only %d of %d clients were streaming\n", reading, NCLIENTS);
done:
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "events_clients: could not remove %s\n", dir);
  return rc;
}
