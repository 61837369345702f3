/* Text other programs parse (text.h): JSON strings and XML text as valid
 * UTF-8, and byte counts as people read them. */
#include "base/text.h"

#include <inttypes.h>

/* The length (1-4) of the valid UTF-8 sequence at p, or 0 if it is not one. */
static int base_utf8_len(const unsigned char *p) {
  int n = p[0] < 0x80             ? 1
          : (p[0] & 0xE0) == 0xC0 ? 2
          : (p[0] & 0xF0) == 0xE0 ? 3
          : (p[0] & 0xF8) == 0xF0 ? 4
                                  : 0;
  if (n == 2 && p[0] < 0xC2)
    return 0; /* overlong */
  for (int i = 1; i < n; i++)
    if ((p[i] & 0xC0) != 0x80)
      return 0;
  if (n == 3 && ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] >= 0xA0)))
    return 0; /* overlong or a surrogate */
  if (n == 4 && ((p[0] == 0xF0 && p[1] < 0x90) || p[0] > 0xF4 || (p[0] == 0xF4 && p[1] >= 0x90)))
    return 0;
  return n;
}

void base_write_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
    int n = base_utf8_len(p);
    if (n == 0) {
      fputs("\\ufffd", f);
      p++;
    } else if (*p == '"' || *p == '\\') {
      fprintf(f, "\\%c", *p++);
    } else if (*p == '\n') {
      fputs("\\n", f);
      p++;
    } else if (*p < 0x20) {
      fprintf(f, "\\u%04x", *p++);
    } else {
      fwrite(p, 1, (size_t)n, f);
      p += n;
    }
  }
  fputc('"', f);
}

void base_write_xml_text(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
    int n = base_utf8_len(p);
    if (n == 0) {
      fputs("\xef\xbf\xbd", f); /* U+FFFD */
      p++;
      continue;
    }
    switch (*p) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    default:
      if (*p >= 0x20 || *p == '\t')
        fwrite(p, 1, (size_t)n, f);
    }
    p += n;
  }
}

const char *base_fmt_bytes(uint64_t bytes, char *buf, size_t len) {
  if (bytes >= (1ull << 30))
    snprintf(buf, len, "%.2f GiB", (double)bytes / (double)(1ull << 30));
  else
    snprintf(buf, len, "%.1f MiB", (double)bytes / (double)(1ull << 20));
  return buf;
}

void base_fmt_size(char *buf, size_t n, uint64_t b) {
  if (b >= (1ull << 30))
    snprintf(buf, n, "%.1f GiB", (double)b / (double)(1ull << 30));
  else if (b >= (1ull << 20))
    snprintf(buf, n, "%.0f MiB", (double)b / (double)(1ull << 20));
  else if (b >= 1024)
    snprintf(buf, n, "%.0f KiB", (double)b / 1024.0);
  else
    snprintf(buf, n, "%" PRIu64 " B", b);
}
