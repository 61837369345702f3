/* espeak-ng speech and the LPC vocoder (speech.h). */
#include "stages/audio/speech.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/decode.h"

#ifdef EBB_HAVE_ESPEAK
#include <espeak-ng/speak_lib.h>

/* What espeak's callback collects for one stg_speech_say. */
typedef struct say_buf {
  short *pcm;
  size_t n, cap;
  double *words;
  size_t *at;
  size_t nw, wcap, acap;
  int oom;
} say_buf;

static pthread_mutex_t say_lock = PTHREAD_MUTEX_INITIALIZER;
static int say_rate; /* espeak's output rate once initialised, else 0 (<0: failed) */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 0;
  size_t c = *cap ? *cap : 4096;
  while (c < need)
    c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q)
    return -1;
  *p = q;
  *cap = c;
  return 0;
}

static int say_cb(short *wav, int num, espeak_EVENT *ev) {
  say_buf *b = ev ? ev->user_data : NULL;
  if (!b)
    return 0;
  if (wav && num > 0) {
    if (grow((void **)&b->pcm, &b->cap, b->n + (size_t)num, sizeof *b->pcm))
      return b->oom = 1;
    memcpy(b->pcm + b->n, wav, (size_t)num * sizeof *wav);
    b->n += (size_t)num;
  }
  for (; ev->type != espeakEVENT_LIST_TERMINATED; ev++) {
    if (ev->type != espeakEVENT_WORD)
      continue;
    if (ev->length <= 0)
      continue; /* the empty word espeak may report at the end */
    if (grow((void **)&b->words, &b->wcap, b->nw + 1, sizeof *b->words) ||
        grow((void **)&b->at, &b->acap, b->nw + 1, sizeof *b->at))
      return b->oom = 1;
    b->at[b->nw] = ev->text_position > 0 ? (size_t)ev->text_position - 1 : 0;
    b->words[b->nw++] = ev->audio_position / 1000.0;
  }
  return 0;
}

static int say_init(void) {
  if (say_rate == 0) {
    int r = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, NULL, espeakINITIALIZE_DONT_EXIT);
    say_rate = r > 0 ? r : -1;
    if (say_rate > 0) {
      espeak_SetSynthCallback(say_cb);
      if (espeak_SetVoiceByName("en-us") != EE_OK)
        espeak_SetVoiceByName("en");
    }
  }
  return say_rate > 0 ? 0
                      : ebb_seterr(EBB_EIO, "espeak-ng: cannot initialise (is espeak-ng-data "
                                            "installed? scripts/install-deps.sh installs it)");
}

int stg_speech_say(const char *text, uint32_t rate, float **x, uint64_t *n, double **word_s,
                   size_t **word_at, size_t *nwords) {
  say_buf b = {0};
  float *f = NULL;
  int rc;
  pthread_mutex_lock(&say_lock);
  if ((rc = say_init()))
    goto done;
  espeak_ERROR e =
      espeak_Synth(text, strlen(text) + 1, 0, POS_CHARACTER, 0, espeakCHARS_UTF8, NULL, &b);
  if (e != EE_OK || b.oom) {
    rc = b.oom ? ebb_seterr(EBB_ENOMEM, "espeak-ng: out of memory for the speech")
               : ebb_seterr(EBB_EIO, "espeak-ng: cannot speak \"%.40s\" (error %d)", text, e);
    goto done;
  }
  if (!(f = malloc((b.n ? b.n : 1) * sizeof *f))) {
    rc = ebb_seterr(EBB_ENOMEM, "espeak-ng: out of memory for the speech");
    goto done;
  }
  for (size_t i = 0; i < b.n; i++)
    f[i] = (float)(b.pcm[i] / 32768.0);
  if ((uint32_t)say_rate != rate && b.n) {
    float *r = NULL;
    uint64_t m = 0;
    if ((rc = stg_audio_resample(f, b.n, (uint32_t)say_rate, rate, &r, &m)))
      goto done;
    free(f);
    f = r;
    *n = m;
  } else {
    *n = b.n;
  }
  *x = f;
  f = NULL;
  if (word_s) {
    *word_s = b.words;
    *word_at = b.at;
    *nwords = b.nw;
    b.words = NULL;
    b.at = NULL;
  }
done:
  pthread_mutex_unlock(&say_lock);
  free(f);
  free(b.pcm);
  free(b.words);
  free(b.at);
  return rc;
}
/* espeak-ng's IPA (en-us) to CMU phones; longest match first. */
static const struct {
  const char *ipa, *cmu;
} ipa_cmu[] = {
    {"tʃ", "CH"}, {"dʒ", "JH"}, {"eɪ", "EY"}, {"aɪ", "AY"}, {"aʊ", "AW"}, {"oʊ", "OW"},
    {"ɔɪ", "OY"}, {"ɜː", "ER"}, {"ɑː", "AA"}, {"ɔː", "AO"}, {"iː", "IY"}, {"uː", "UW"},
    {"oː", "AO"}, {"ɝ", "ER"},  {"ɚ", "ER"},  {"ɑ", "AA"},  {"æ", "AE"},  {"ʌ", "AH"},
    {"ə", "AH"},  {"ɐ", "AH"},  {"ɔ", "AO"},  {"ɛ", "EH"},  {"e", "EH"},  {"ɪ", "IH"},
    {"ᵻ", "IH"},  {"i", "IY"},  {"ʊ", "UH"},  {"u", "UW"},  {"o", "OW"},  {"a", "AA"},
    {"b", "B"},   {"d", "D"},   {"ð", "DH"},  {"f", "F"},   {"ɡ", "G"},   {"g", "G"},
    {"h", "HH"},  {"j", "Y"},   {"k", "K"},   {"l", "L"},   {"m", "M"},   {"n", "N"},
    {"ŋ", "NG"},  {"p", "P"},   {"ɹ", "R"},   {"r", "R"},   {"s", "S"},   {"ʃ", "SH"},
    {"t", "T"},   {"θ", "TH"},  {"v", "V"},   {"w", "W"},   {"z", "Z"},   {"ʒ", "ZH"},
    {"ɾ", "T"},   {"ʔ", "T"},   {"x", "K"},
};
/* marks with no phone of their own: stress, length, syllable, tie */
static const char *const ipa_skip[] = {"ˈ", "ˌ", "ː", ".", "-", " ", "_", "͡", "ʲ", "̩"};

int stg_speech_phones(const char *word, char *out, size_t n) {
  int rc = 0;
  pthread_mutex_lock(&say_lock);
  if ((rc = say_init()))
    goto done;
  const void *p = word;
  const char *ipa = espeak_TextToPhonemes(&p, espeakCHARS_UTF8, 2 /* IPA */);
  size_t k = 0;
  if (n)
    out[0] = '\0';
  for (const char *q = ipa ? ipa : ""; *q && !rc;) {
    size_t best = 0, bi = 0;
    for (size_t i = 0; i < sizeof ipa_cmu / sizeof ipa_cmu[0]; i++) {
      size_t l = strlen(ipa_cmu[i].ipa);
      if (l > best && !strncmp(q, ipa_cmu[i].ipa, l))
        best = l, bi = i;
    }
    if (best) {
      int w = snprintf(out + k, n - k, "%s%s", k ? " " : "", ipa_cmu[bi].cmu);
      if (w < 0 || (size_t)w >= n - k)
        rc = ebb_seterr(EBB_EINPUT, "espeak-ng: the pronunciation of \"%s\" is too long", word);
      k += (size_t)w;
      q += best;
      continue;
    }
    for (size_t i = 0; i < sizeof ipa_skip / sizeof ipa_skip[0] && !best; i++)
      if (!strncmp(q, ipa_skip[i], strlen(ipa_skip[i])))
        best = strlen(ipa_skip[i]);
    if (!best)
      rc =
          ebb_seterr(EBB_EINPUT, "espeak-ng: \"%s\" has a sound with no CMU phone (%s)", word, ipa);
    q += best;
  }
  if (!rc && k == 0)
    rc = ebb_seterr(EBB_EINPUT, "espeak-ng: no pronunciation for \"%s\"", word);
done:
  pthread_mutex_unlock(&say_lock);
  return rc;
}
#else
int stg_speech_phones(const char *word, char *out, size_t n) {
  (void)word, (void)out, (void)n;
  return ebb_seterr(EBB_ENOLIB, "ebb was built without libespeak-ng");
}
int stg_speech_say(const char *text, uint32_t rate, float **x, uint64_t *n, double **word_s,
                   size_t **word_at, size_t *nwords) {
  (void)text, (void)rate, (void)x, (void)n, (void)word_s, (void)word_at, (void)nwords;
  return ebb_seterr(EBB_ENOLIB, "ebb was built without libespeak-ng (Debian package "
                                "libespeak-ng-dev; scripts/install-deps.sh installs it)");
}
#endif

void stg_speech_trim(const float *x, uint64_t n, uint32_t rate, uint64_t *first, uint64_t *count) {
  uint64_t hop = rate / 200 ? rate / 200 : 1, nf = (n + hop - 1) / hop;
  double peak = 0;
  for (uint64_t f = 0; f < nf; f++) {
    double e = 0;
    for (uint64_t k = f * hop; k < n && k < (f + 1) * hop; k++)
      e += (double)x[k] * x[k];
    peak = fmax(peak, e);
  }
  double floor = peak * 1e-4; /* -40 dB */
  uint64_t a = nf, b = 0;
  for (uint64_t f = 0; f < nf; f++) {
    double e = 0;
    for (uint64_t k = f * hop; k < n && k < (f + 1) * hop; k++)
      e += (double)x[k] * x[k];
    if (e > floor && peak > 0) {
      if (a == nf)
        a = f;
      b = f + 1;
    }
  }
  if (a == nf) {
    *first = 0;
    *count = 0;
    return;
  }
  *first = a * hop;
  *count = (b * hop < n ? b * hop : n) - a * hop;
}

/* --- the LPC vocoder ------------------------------------------------------- */

#define VC_PI 3.14159265358979323846
#define VC_MAXP 48

typedef struct vc_frame {
  double a[VC_MAXP + 1]; /* a[0] = 1; y[n] = g e[n] - sum a[k] y[n-k] */
  double g;              /* excitation gain (unit-power excitation) */
  double voiced;         /* 0..1 */
} vc_frame;

/* Levinson-Durbin on r[0..p]: a[0..p], returns the prediction error. */
static double levinson(const double *r, int p, double *a) {
  double err = r[0], tmp[VC_MAXP + 1];
  memset(a, 0, (size_t)(p + 1) * sizeof *a);
  a[0] = 1.0;
  if (err <= 0)
    return 0;
  for (int i = 1; i <= p; i++) {
    double acc = r[i];
    for (int j = 1; j < i; j++)
      acc += a[j] * r[i - j];
    double k = -acc / err;
    memcpy(tmp, a, (size_t)(i + 1) * sizeof *a);
    for (int j = 1; j < i; j++)
      a[j] = tmp[j] + k * tmp[i - j];
    a[i] = k;
    err *= 1.0 - k * k;
    if (err <= 0)
      return 0;
  }
  return err;
}

/* One analysis frame centred on sample c of the pre-emphasised speech e. */
static void analyse(const float *x, const float *e, uint64_t nx, int64_t c, uint32_t rate, int p,
                    int win, vc_frame *f) {
  double w[4096], r[VC_MAXP + 1], wsum = 0;
  int h = win / 2;
  for (int i = 0; i < win; i++) {
    int64_t k = c - h + i;
    double hann = 0.5 - 0.5 * cos(2.0 * VC_PI * (i + 0.5) / win);
    w[i] = (k >= 0 && (uint64_t)k < nx ? e[k] : 0.0) * hann;
    wsum += hann * hann;
  }
  for (int l = 0; l <= p; l++) {
    double s = 0;
    for (int i = l; i < win; i++)
      s += w[i] * w[i - l];
    r[l] = s;
  }
  r[0] *= 1.0 + 1e-6; /* white-noise correction keeps the filter stable */
  double err = r[0] > 1e-12 ? levinson(r, p, f->a) : 0.0;
  if (err <= 0) {
    memset(f->a, 0, sizeof f->a);
    f->a[0] = 1.0;
  }
  f->g = sqrt(err / wsum);
  /* periodicity: the normalised autocorrelation peak over 70..400 Hz lags,
   * on the plain (not pre-emphasised) speech */
  int lo = (int)(rate / 400), hi = (int)(rate / 70);
  double best = 0, e0 = 0;
  for (int i = 0; i < win; i++) {
    int64_t k = c - h + i;
    double v = k >= 0 && (uint64_t)k < nx ? x[k] : 0.0;
    e0 += v * v;
  }
  for (int l = lo; l <= hi && l < win; l++) {
    double s = 0, e1 = 0, e2 = 0;
    for (int i = 0; i + l < win; i++) {
      int64_t k = c - h + i;
      double u = k >= 0 && (uint64_t)k < nx ? x[k] : 0.0;
      double v = k + l >= 0 && (uint64_t)(k + l) < nx ? x[k + l] : 0.0;
      s += u * v;
      e1 += u * u;
      e2 += v * v;
    }
    if (e1 > 0 && e2 > 0)
      best = fmax(best, s / sqrt(e1 * e2));
  }
  (void)e0;
  double v = (best - 0.3) / 0.3;
  f->voiced = v < 0 ? 0 : v > 1 ? 1 : v;
}

static double vc_noise(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return ((double)(z >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0) * 1.7320508;
}

/* One sample of the excitation: harmonics of hz up to 7 kHz (below the
 * Nyquist) weighted by the voicing v, and noise weighted by 1 - v. */
static double vc_excite(double hz, double v, uint32_t rate, double *phase, uint64_t *seed) {
  double ex = 0, nyq = rate / 2.0;
  if (v > 0) {
    *phase += 2.0 * VC_PI * hz / rate;
    if (*phase > 2.0 * VC_PI)
      *phase = fmod(*phase, 2.0 * VC_PI);
    int nh = (int)((fmin(nyq - 200.0, 7000.0)) / hz);
    if (nh < 1)
      nh = 1;
    double s = 0;
    for (int h = 1; h <= nh; h++)
      s += cos(h * *phase);
    ex += sqrt(v) * s * sqrt(2.0 / nh);
  }
  if (v < 1)
    ex += sqrt(1 - v) * vc_noise(seed);
  return ex;
}

int stg_vocode(const float *x, uint64_t nx, uint32_t rate, stg_f0_fn f0, void *user,
               uint64_t noise_seed, double gain, int hold_vowels, float *y, uint64_t ny) {
  if (nx == 0 || ny == 0)
    return 0;
  int p = 2 + (int)(rate / 1000);
  if (p > VC_MAXP)
    p = VC_MAXP;
  int hop = (int)(rate / 200), win = (int)(rate / 40);
  if (hop < 1)
    hop = 1;
  if (win > 4096)
    win = 4096;
  size_t nf = (size_t)(nx / (uint64_t)hop) + 1;
  vc_frame *fr = malloc(nf * sizeof *fr);
  float *e = malloc(nx * sizeof *e);
  if (!fr || !e) {
    free(fr);
    free(e);
    return ebb_seterr(EBB_ENOMEM, "vocoder: out of memory for %zu frames", nf);
  }
  e[0] = x[0];
  for (uint64_t k = 1; k < nx; k++)
    e[k] = x[k] - 0.97f * x[k - 1];
  for (size_t i = 0; i < nf; i++)
    analyse(x, e, nx, (int64_t)i * hop, rate, p, win, &fr[i]);
  free(e);
  /* the time map: a lengthened word holds its vowels (periodic frames)
   * longer and says its consonants at their own speed, as a singer does;
   * a shortened one is compressed evenly */
  double nv = 0;
  for (size_t i = 0; i < nf; i++)
    nv += fr[i].voiced >= 0.5;
  double unv = ((double)nf - nv) * hop, hold = nv > 0 ? ((double)ny - unv) / (nv * hop) : 0;
  int even = !hold_vowels || hold < 1.0;
  double mem[VC_MAXP] = {0}, phase = 0, deemph = 0;
  double stretch = (double)nx / (double)ny, cum = 0; /* cum: output start of frame fi */
  size_t fi = 0;
  for (uint64_t n = 0; n < ny; n++) {
    double t = (double)n / rate, u;
    if (even) {
      u = (double)n * stretch / hop;
    } else {
      double span = (fr[fi].voiced >= 0.5 ? hold : 1.0) * hop;
      while (fi + 1 < nf && (double)n >= cum + span) {
        cum += span;
        fi++;
        span = (fr[fi].voiced >= 0.5 ? hold : 1.0) * hop;
      }
      u = (double)fi + fmin(1.0, ((double)n - cum) / span);
    }
    if (u > (double)(nf - 1))
      u = (double)(nf - 1);
    size_t i = (size_t)u, j = i + 1 < nf ? i + 1 : i;
    double w = u - (double)i;
    const vc_frame *F = &fr[w >= 0.5 ? j : i];
    double g = fr[i].g * (1 - w) + fr[j].g * w;
    double hz = f0 ? f0(t, user) : 0;
    double v = hz > 0 ? F->voiced : 0;
    double out = g * vc_excite(hz, v, rate, &phase, &noise_seed);
    for (int k = 1; k <= p; k++)
      out -= F->a[k] * mem[k - 1];
    memmove(mem + 1, mem, (size_t)(p - 1) * sizeof *mem);
    mem[0] = out;
    deemph = out + 0.97 * deemph;
    y[n] += (float)(gain * deemph);
  }
  free(fr);
  return 0;
}
