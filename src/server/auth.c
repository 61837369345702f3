/* Who may call the server. Tokens come from --token-file (one per line:
 * `TOKEN [ROLE]`, ROLE `admin` (the default) or `submit`; `#` starts a
 * comment) and from EBB_TOKEN (admin). A request names one with
 * `Authorization: Bearer TOKEN`; tokens are compared in constant time. A
 * token's owner tag (a hash of it, never the token) marks the jobs it made.
 *
 * Browsers: the Host header must name this server (an IP address, localhost,
 * the listen host or an --allow-host name), so a DNS name rebound to
 * 127.0.0.1 is refused. An Origin header, when sent, must be this server's
 * own origin: scheme http, the host the Host header gives (a browser sets
 * both from the page's URL, so a page elsewhere cannot match it) and the
 * port the server is bound to; or one the operator listed with
 * --allow-origin (a reverse proxy's public origin). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <arpa/inet.h>

#include "base/log.h"
#include "server/internal.h"

typedef struct token {
  char *secret;
  size_t len;
  srv_role role;
  char owner[24];
} token;

struct srv_auth {
  token *t;
  size_t n;
  char **hosts;
  size_t nhosts;
  char **origins; /* --allow-origin, as given (checked by srv_auth_add_origin) */
  size_t norigins;
};

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static int add_token(srv_auth *a, const char *secret, size_t len, srv_role role) {
  token *t = realloc(a->t, (a->n + 1) * sizeof *t);
  if (!t)
    return ebb_seterr(EBB_ENOMEM, "tokens: out of host memory");
  a->t = t;
  token *k = &a->t[a->n];
  if (!(k->secret = strndup(secret, len)))
    return ebb_seterr(EBB_ENOMEM, "tokens: out of host memory");
  k->len = len;
  k->role = role;
  snprintf(k->owner, sizeof k->owner, "t%016llx", (unsigned long long)fnv1a(secret, len));
  a->n++;
  return 0;
}

/* One line of the token file: TOKEN [ROLE]. */
static int parse_line(srv_auth *a, const char *file, int line, char *s) {
  char *save = NULL, *tok = strtok_r(s, " \t\r\n", &save);
  if (!tok || tok[0] == '#')
    return 0;
  char *role = strtok_r(NULL, " \t\r\n", &save), *more = strtok_r(NULL, " \t\r\n", &save);
  srv_role r = SRV_ROLE_ADMIN;
  if (role && !strcmp(role, "submit"))
    r = SRV_ROLE_SUBMIT;
  else if (role && strcmp(role, "admin"))
    return ebb_seterr(EBB_EINVAL,
                      "--token-file %s, line %d: role '%s': expected admin or "
                      "submit",
                      file, line, role);
  if (more && more[0] != '#')
    return ebb_seterr(EBB_EINVAL,
                      "--token-file %s, line %d: expected TOKEN [ROLE], found "
                      "more",
                      file, line);
  if (strlen(tok) < 16)
    return ebb_seterr(EBB_EINVAL,
                      "--token-file %s, line %d: a token needs at least 16 "
                      "characters (make one: head -c 24 /dev/urandom | base64)",
                      file, line);
  return add_token(a, tok, strlen(tok), r);
}

/* A token file others may read or write is served (refusing it would take
 * a running service down on a chmod), with a warning naming it. */
static void check_mode(FILE *f, const char *path) {
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !(st.st_mode & (S_IRWXG | S_IRWXO)))
    return;
  base_log(EBB_LOG_WARN, "server",
           "--token-file %s has mode %04o: users other than its owner can %s it and so hold "
           "its tokens; make it private: chmod 600 %s",
           path, (unsigned)(st.st_mode & 07777),
           st.st_mode & (S_IWGRP | S_IWOTH) ? "read or change" : "read", path);
}

static int load_file(srv_auth *a, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return ebb_seterr(EBB_EINVAL, "--token-file %s: %s", path, strerror(errno));
  check_mode(f, path);
  char line[1024];
  int rc = 0, no = 0;
  while (!rc && fgets(line, sizeof line, f))
    rc = parse_line(a, path, ++no, line);
  fclose(f);
  if (!rc && !a->n)
    rc = ebb_seterr(EBB_EINVAL,
                    "--token-file %s: no token in the file (one per line: TOKEN "
                    "[admin|submit])",
                    path);
  return rc;
}

int srv_auth_load(const char *token_file, const char *env_token, srv_auth **out) {
  *out = NULL;
  srv_auth *a = calloc(1, sizeof *a);
  if (!a)
    return ebb_seterr(EBB_ENOMEM, "tokens: out of host memory");
  int rc = 0;
  if (token_file)
    rc = load_file(a, token_file);
  if (!rc && env_token && *env_token)
    rc = strlen(env_token) < 16
             ? ebb_seterr(EBB_EINVAL, "EBB_TOKEN: a token needs at least 16 characters")
             : add_token(a, env_token, strlen(env_token), SRV_ROLE_ADMIN);
  if (rc) {
    srv_auth_free(a);
    return rc;
  }
  *out = a;
  return 0;
}

void srv_auth_free(srv_auth *a) {
  if (!a)
    return;
  for (size_t i = 0; i < a->n; i++)
    free(a->t[i].secret);
  for (size_t i = 0; i < a->nhosts; i++)
    free(a->hosts[i]);
  for (size_t i = 0; i < a->norigins; i++)
    free(a->origins[i]);
  free(a->t);
  free(a->hosts);
  free(a->origins);
  free(a);
}

int srv_auth_add_host(srv_auth *a, const char *host) {
  char **h = realloc(a->hosts, (a->nhosts + 1) * sizeof *h);
  if (!h)
    return ebb_seterr(EBB_ENOMEM, "--allow-host: out of host memory");
  a->hosts = h;
  if (!(a->hosts[a->nhosts] = strdup(host)))
    return ebb_seterr(EBB_ENOMEM, "--allow-host: out of host memory");
  a->nhosts++;
  return 0;
}

/* "http://host[:port]" or "https://host[:port]" (no path, no user): what a
 * browser sends as Origin. */
static int origin_form(const char *o) {
  const char *p = !strncasecmp(o, "http://", 7)    ? o + 7
                  : !strncasecmp(o, "https://", 8) ? o + 8
                                                   : NULL;
  if (!p || !*p || strlen(o) > 255)
    return 0;
  for (; *p; p++)
    if (!isalnum((unsigned char)*p) && !strchr(".-:[]", *p))
      return 0;
  return 1;
}

int srv_auth_add_origin(srv_auth *a, const char *origin) {
  if (!origin_form(origin))
    return ebb_seterr(EBB_EINVAL,
                      "--allow-origin %s: expected SCHEME://HOST[:PORT] as a browser "
                      "sends it (e.g. https://ebb.example.com), no path",
                      origin);
  char **o = realloc(a->origins, (a->norigins + 1) * sizeof *o);
  if (!o)
    return ebb_seterr(EBB_ENOMEM, "--allow-origin: out of host memory");
  a->origins = o;
  if (!(a->origins[a->norigins] = strdup(origin)))
    return ebb_seterr(EBB_ENOMEM, "--allow-origin: out of host memory");
  a->norigins++;
  return 0;
}

int srv_auth_enabled(const srv_auth *a) { return a && a->n > 0; }

/* Constant time in the secret's content (the length is not a secret). */
static int same(const char *a, size_t an, const char *b, size_t bn) {
  unsigned char d = an != bn;
  size_t n = an < bn ? an : bn;
  for (size_t i = 0; i < n; i++)
    d |= (unsigned char)(a[i] ^ b[i]);
  return d == 0;
}

srv_role srv_auth_check(const srv_auth *a, struct MHD_Connection *c, char *owner, size_t n) {
  owner[0] = '\0';
  if (!srv_auth_enabled(a))
    return SRV_ROLE_ADMIN;
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  if (!h || strncasecmp(h, "Bearer ", 7))
    return SRV_ROLE_NONE;
  h += 7;
  while (*h == ' ')
    h++;
  size_t len = strlen(h);
  while (len && (h[len - 1] == ' ' || h[len - 1] == '\t'))
    len--;
  srv_role role = SRV_ROLE_NONE;
  for (size_t i = 0; i < a->n; i++) /* every token compared: no early exit */
    if (same(h, len, a->t[i].secret, a->t[i].len)) {
      role = a->t[i].role;
      snprintf(owner, n, "%s", a->t[i].owner);
    }
  return role;
}

/* --- Host and Origin ------------------------------------------------------------ */
/* host (no port) is an IP literal, localhost, the listen host or allowed. */
static int name_ok(const srv_server *s, const char *host) {
  unsigned char buf[16];
  if (inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1)
    return 1;
  if (!strcasecmp(host, "localhost") || !strcasecmp(host, s->host))
    return 1;
  for (size_t i = 0; i < s->auth->nhosts; i++)
    if (!strcasecmp(host, s->auth->hosts[i]))
      return 1;
  return 0;
}

/* "HOST[:PORT]" or "[V6][:PORT]" -> HOST. */
static int host_part(const char *hp, char *out, size_t n) {
  const char *end;
  if (hp[0] == '[') {
    end = strchr(hp, ']');
    if (!end)
      return -1;
    hp++;
  } else {
    end = strchr(hp, ':');
    if (!end)
      end = hp + strlen(hp);
  }
  size_t len = (size_t)(end - hp);
  if (!len || len >= n)
    return -1;
  memcpy(out, hp, len);
  out[len] = '\0';
  return 0;
}

/* The port of "HOST[:PORT]" / "[V6][:PORT]"; dflt when none is given, -1
 * when it is not a number. */
static long port_part(const char *hp, long dflt) {
  const char *p = hp[0] == '[' ? strchr(hp, ']') : hp;
  p = p ? strchr(p, ':') : NULL;
  if (!p)
    return dflt;
  char *end;
  long v = strtol(p + 1, &end, 10);
  return p[1] && !*end && v >= 0 && v <= 65535 ? v : -1;
}

/* Origin is this server's own: http, the Host header's host (or the listen
 * host without one) and the bound port; or an --allow-origin. */
static int own_origin(const srv_server *s, const char *origin, const char *host) {
  for (size_t i = 0; i < s->auth->norigins; i++)
    if (!strcasecmp(origin, s->auth->origins[i]))
      return 1;
  if (strncasecmp(origin, "http://", 7))
    return 0; /* this server speaks plain http: "null", https:, file: are elsewhere */
  const char *hp = origin + 7;
  char oh[256], hh[256];
  if (strpbrk(hp, "/?#@") || host_part(hp, oh, sizeof oh) != 0)
    return 0;
  if (port_part(hp, 80) != s->port)
    return 0;
  if (host)
    return host_part(host, hh, sizeof hh) == 0 && !strcasecmp(oh, hh);
  return !strcasecmp(oh, s->host[0] ? s->host : "0.0.0.0");
}

int srv_host_ok(const srv_server *s, struct MHD_Connection *c, char *msg, size_t n) {
  const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
  const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
  char h[256];
  if (host && (host_part(host, h, sizeof h) != 0 || !name_ok(s, h))) {
    snprintf(msg, n,
             "Host '%.200s' does not name this server (start it with --allow-host NAME "
             "to accept that name)",
             host);
    return 0;
  }
  if (origin && !own_origin(s, origin, host)) {
    snprintf(msg, n,
             "Origin '%.200s' is not this server (http://%.200s with port %d): requests "
             "from other web pages are refused (start it with --allow-origin ORIGIN to "
             "accept that one)",
             origin, host ? h : s->host, s->port);
    return 0;
  }
  return 1;
}

int srv_random_id(char out[33]) {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t k = getrandom(b + got, sizeof b - got, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return ebb_seterr(EBB_EIO, "getrandom: %s", strerror(errno));
    got += (size_t)k;
  }
  for (size_t i = 0; i < sizeof b; i++)
    snprintf(out + 2 * i, 3, "%02x", b[i]);
  return 0;
}
