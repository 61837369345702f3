/* Word normalisation, word distance and the Needleman-Wunsch alignment of
 * lyric words to transcript words (align.h). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/align.h"
#include "stages/audio/st_util.h"

#define AL_MATCH_MAX 0.4 /* word distance at or below which an aligned pair matches */

void stg_align_normalise(const char *word, char *out, size_t n) {
  size_t k = 0;
  for (const unsigned char *p = (const unsigned char *)word; *p && k + 1 < n; p++) {
    if (*p >= 0x80)
      out[k++] = (char)*p;
    else if (isalnum(*p))
      out[k++] = (char)tolower(*p);
  }
  if (n)
    out[k] = '\0';
}

static size_t levenshtein(const char *a, size_t la, const char *b, size_t lb) {
  size_t stack[65], *row = lb < 65 ? stack : malloc((lb + 1) * sizeof *row);
  if (!row)
    return la > lb ? la : lb; /* out of memory: the worst case */
  for (size_t j = 0; j <= lb; j++)
    row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best)
        best = up + 1;
      if (row[j - 1] + 1 < best)
        best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  size_t d = row[lb];
  if (row != stack)
    free(row);
  return d;
}

double stg_align_word_distance(const char *a, const char *b) {
  char na[128], nb[128];
  stg_align_normalise(a, na, sizeof na);
  stg_align_normalise(b, nb, sizeof nb);
  size_t la = strlen(na), lb = strlen(nb), m = la > lb ? la : lb;
  if (m == 0)
    return 0.0;
  return (double)levenshtein(na, la, nb, lb) / (double)m;
}

int stg_align_words(const char *const *a, size_t na, const char *const *b, size_t nb, int *map) {
  for (size_t i = 0; i < na; i++)
    map[i] = -1;
  if (na == 0 || nb == 0)
    return 0;
  size_t w = nb + 1;
  float *D = malloc((na + 1) * w * sizeof *D);
  float *sub = malloc(na * nb * sizeof *sub);
  if (!D || !sub) {
    free(D);
    free(sub);
    return ebb_seterr(EBB_ENOMEM, "align: out of memory for %zu x %zu words", na, nb);
  }
  /* na x nb grows with the lyrics: a look at the deadline every row */
  for (size_t i = 0; i < na && !stg_st_stop(); i++)
    for (size_t j = 0; j < nb; j++)
      sub[i * nb + j] = (float)(2.0 * stg_align_word_distance(a[i], b[j]));
  for (size_t j = 0; j <= nb; j++)
    D[j] = (float)j;
  for (size_t i = 1; i <= na; i++) {
    if (stg_st_stop()) {
      free(D);
      free(sub);
      return ebb_seterr(EBB_ECANCELED, "align: cancelled matching %zu x %zu words", na, nb);
    }
    D[i * w] = (float)i;
    for (size_t j = 1; j <= nb; j++) {
      float best = D[(i - 1) * w + j - 1] + sub[(i - 1) * nb + j - 1];
      float del = D[(i - 1) * w + j] + 1.0f, ins = D[i * w + j - 1] + 1.0f;
      if (del < best)
        best = del;
      if (ins < best)
        best = ins;
      D[i * w + j] = best;
    }
  }
  size_t i = na, j = nb;
  while (i > 0 && j > 0) {
    float s = sub[(i - 1) * nb + j - 1];
    if (D[i * w + j] == D[(i - 1) * w + j - 1] + s) {
      if (s <= 2.0f * (float)AL_MATCH_MAX)
        map[i - 1] = (int)(j - 1);
      i--, j--;
    } else if (D[i * w + j] == D[(i - 1) * w + j] + 1.0f) {
      i--;
    } else {
      j--;
    }
  }
  free(D);
  free(sub);
  return 0;
}
