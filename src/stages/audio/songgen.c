/* The synthetic song: see songgen.h. Everything random comes from one
 * splitmix64 stream seeded by the caller, consumed in a fixed order. */
#include "stages/audio/songgen.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/speech.h"

#define SG_PI 3.14159265358979323846
#define SG_BEAT_S 0.5   /* 120 bpm */
#define SG_BAR_S 2.0    /* 4/4 */
#define SG_PHRASE_S 4.0 /* two bars */
#define SG_GAP_S 0.06   /* articulation gap before the next note */

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }
static int rng_int(rng *r, int n) { return (int)(rng_unit(r) * n); }
static double rng_noise(rng *r) { return 2.0 * rng_unit(r) - 1.0; }

stg_songgen_params stg_songgen_defaults(void) {
  return (stg_songgen_params){.seed = 1, .rate = 16000, .seconds = 26.0, .accomp_gain = 0.5};
}

static const char *const sg_words[] = {"sun",   "rise",  "over",   "the",   "hill",    "light",
                                       "falls", "on",    "my",     "face",  "wind",    "sings",
                                       "a",     "song",  "of",     "home",  "rain",    "comes",
                                       "down",  "slow",  "we",     "walk",  "through", "fields",
                                       "gold",  "and",   "green",  "night", "will",    "fall",
                                       "stars", "shine", "bright", "hold",  "your",    "hand",
                                       "near",  "dream", "away",   "sea",   "blue",    "sky",
                                       "river", "runs",  "free",   "heart", "beats",   "time",
                                       "goes",  "by"};
#define SG_NWORDS (sizeof sg_words / sizeof sg_words[0])

static const int sg_major[7] = {0, 2, 4, 5, 7, 9, 11};
/* Vowel formants (F1, F2, F3) in Hz: a, e, i, o, u. */
static const double sg_formants[5][3] = {{800, 1200, 2500},
                                         {450, 1900, 2600},
                                         {300, 2250, 3000},
                                         {500, 900, 2400},
                                         {350, 800, 2300}};

static double midi_hz(double m) { return 440.0 * pow(2.0, (m - 69.0) / 12.0); }

/* The scale degree (any integer) of the key's major scale as a MIDI note. */
static int degree_midi(int tonic, int deg) {
  int oct = deg >= 0 ? deg / 7 : -((-deg + 6) / 7);
  int d = deg - oct * 7;
  return tonic + 12 * oct + sg_major[d];
}

typedef struct sg_build {
  stg_song *s;
  rng r;
  size_t cap;
} sg_build;

/* The words voice's speech, each word spoken once per process and rate and
 * kept: espeak-ng's output for a word depends on what it said before in the
 * process (a few samples' length and the noise), so speaking it again for
 * a second song would make the same seed sing differently. A fresh process
 * speaks them in the song's order, so the demo is the same on every build. */
#define SG_SAID_MAX 512
static struct sg_said {
  size_t word;
  uint32_t rate;
  float *x; /* trimmed of silence */
  uint64_t n;
} sg_said[SG_SAID_MAX];
static size_t sg_nsaid;
static pthread_mutex_t sg_said_lock = PTHREAD_MUTEX_INITIALIZER;

static int said(size_t wi, uint32_t rate, const float **x, uint64_t *n) {
  int rc = 0;
  pthread_mutex_lock(&sg_said_lock);
  size_t i = 0;
  while (i < sg_nsaid && !(sg_said[i].word == wi && sg_said[i].rate == rate))
    i++;
  if (i == sg_nsaid) {
    float *s = NULL;
    uint64_t ns = 0, first = 0, count = 0;
    if (i == SG_SAID_MAX) {
      rc = ebb_seterr(EBB_ENOMEM, "songgen: more than %d spoken words kept", SG_SAID_MAX);
      goto done;
    }
    if ((rc = stg_speech_say(sg_words[wi], rate, &s, &ns, NULL, NULL, NULL)))
      goto done;
    stg_speech_trim(s, ns, rate, &first, &count);
    if (count == 0)
      count = ns, first = 0;
    memmove(s, s + first, count * sizeof *s);
    sg_said[i] = (struct sg_said){wi, rate, s, count};
    sg_nsaid++;
  }
  *x = sg_said[i].x;
  *n = sg_said[i].n;
done:
  pthread_mutex_unlock(&sg_said_lock);
  return rc;
}

static int add_note(sg_build *b, double onset, double offset, int midi, int line) {
  stg_song *s = b->s;
  if (s->n_notes == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    stg_song_note *n = realloc(s->notes, cap * sizeof *n);
    if (!n)
      return ebb_seterr(EBB_ENOMEM, "songgen: out of memory for notes");
    s->notes = n;
    b->cap = cap;
  }
  s->notes[s->n_notes++] = (stg_song_note){.onset = onset,
                                           .offset = offset,
                                           .midi = midi,
                                           .line = line,
                                           .word = sg_words[rng_int(&b->r, (int)SG_NWORDS)]};
  return 0;
}

/* The melody: phrases of 2 bars starting after a 1-bar intro; each phrase is
 * 5..7 beats of notes (0.5..2 beats each) then a rest to the bar line. */
static int compose(sg_build *b, int tonic, double seconds) {
  int phrases = (int)((seconds - SG_BAR_S) / SG_PHRASE_S);
  int deg = rng_int(&b->r, 5);
  static const double durs[] = {0.5, 1.0, 1.0, 1.0, 1.5, 2.0};
  for (int p = 0; p < phrases; p++) {
    double t0 = SG_BAR_S + p * SG_PHRASE_S, beats = 0.0;
    double fill = 5.0 + rng_int(&b->r, 3); /* 5..7 beats sung */
    while (beats < fill) {
      double d = durs[rng_int(&b->r, 6)];
      if (beats + d > fill)
        d = fill - beats;
      int step;
      do {
        step = rng_int(&b->r, 5) - 2;
        if (rng_unit(&b->r) < 0.12)
          step = rng_unit(&b->r) < 0.5 ? -4 : 4;
      } while (step == 0 || deg + step < -2 || deg + step > 9);
      deg += step;
      double on = t0 + beats * SG_BEAT_S, off = on + d * SG_BEAT_S - SG_GAP_S;
      int rc = add_note(b, on, off, degree_midi(tonic, deg), p);
      if (rc)
        return rc;
      beats += d;
    }
  }
  b->s->n_lines = phrases;
  return 0;
}

/* The instantaneous sung frequency at t seconds into a note of nominal
 * frequency f: a 40 ms scoop up from -40 cents, then vibrato (5.5 Hz, depth
 * fading in over 0.2 s to +-30 cents). vphase is per-note. */
static double sung_hz(double f, double t, double vphase) {
  double cents = 0.0;
  if (t < 0.04)
    cents -= 40.0 * (1.0 - t / 0.04);
  double depth = t < 0.2 ? 30.0 * (t / 0.2) : 30.0;
  cents += depth * sin(2.0 * SG_PI * 5.5 * t + vphase);
  return f * pow(2.0, cents / 1200.0);
}

static double formant_gain(const double fm[3], double hz) {
  double g = 0.08; /* floor between resonances */
  static const double bw[3] = {110, 140, 200}, amp[3] = {1.0, 0.6, 0.3};
  for (int i = 0; i < 3; i++) {
    double x = (hz - fm[i]) / bw[i];
    g += amp[i] * exp(-0.5 * x * x);
  }
  return g;
}

/* One note's vowel: harmonics at the sung frequency shaped by the formants. */
static void sing_vowel(stg_song *s, const stg_song_note *n, const double *fm, double vphase,
                       double level) {
  double rate = s->rate, nyq = rate / 2.0;
  double f = midi_hz(n->midi), phase = 0.0, len = n->offset - n->onset;
  uint64_t a = (uint64_t)llround(n->onset * rate), e = (uint64_t)llround(n->offset * rate);
  if (e > s->frames)
    e = s->frames;
  for (uint64_t k = a; k < e; k++) {
    double t = (double)(k - a) / rate;
    double hz = sung_hz(f, t, vphase);
    phase += 2.0 * SG_PI * hz / rate;
    if (phase > 2.0 * SG_PI * 1e6)
      phase = fmod(phase, 2.0 * SG_PI);
    double env = 1.0;
    if (t < 0.03)
      env = 0.5 - 0.5 * cos(SG_PI * t / 0.03);
    if (len - t < 0.06)
      env *= 0.5 - 0.5 * cos(SG_PI * (len - t) / 0.06);
    double v = 0.0;
    for (int h = 1; h * hz < nyq - 400.0 && h * hz < 6000.0; h++)
      v += formant_gain(fm, h * hz) / pow(h, 0.6) * sin(h * phase);
    s->vocals[k] += (float)(level * env * v * 0.5);
  }
}

typedef struct sg_pitch {
  double hz, vphase;
} sg_pitch;

static double sg_f0(double t, void *u) {
  const sg_pitch *p = u;
  return sung_hz(p->hz, t, p->vphase);
}

#define SG_WORD_RMS 0.55 /* a sung word's RMS over its level: about the vowels' loudness */

/* One note's word: espeak-ng's speech of it (trimmed of silence), stretched
 * over the note and re-sung on the note's pitch (speech.h's vocoder). */
static int sing_word(sg_build *b, const stg_song_note *n, size_t wi, double vphase, double level,
                     uint64_t noise_seed, float *tmp) {
  stg_song *s = b->s;
  uint32_t rate = s->rate;
  const float *speech = NULL;
  uint64_t nspeech = 0;
  int rc = said(wi, rate, &speech, &nspeech);
  if (rc)
    return rc;
  uint64_t a = (uint64_t)llround(n->onset * rate), e = (uint64_t)llround(n->offset * rate);
  if (e > s->frames)
    e = s->frames;
  if (e <= a || nspeech == 0)
    return 0;
  uint64_t len = e - a;
  memset(tmp, 0, len * sizeof *tmp);
  sg_pitch pitch = {midi_hz(n->midi), vphase};
  if ((rc = stg_vocode(speech, nspeech, rate, sg_f0, &pitch, noise_seed, 1.0, 1, tmp, len)))
    return rc;
  double ss = 0;
  for (uint64_t k = 0; k < len; k++)
    ss += (double)tmp[k] * tmp[k];
  double g = ss > 0 ? level * SG_WORD_RMS / sqrt(ss / (double)len) : 0.0, dur = (double)len / rate;
  for (uint64_t k = 0; k < len; k++) {
    double t = (double)k / rate, env = 1.0;
    if (t < 0.01)
      env = 0.5 - 0.5 * cos(SG_PI * t / 0.01);
    if (dur - t < 0.04)
      env *= 0.5 - 0.5 * cos(SG_PI * (dur - t) / 0.04);
    s->vocals[a + k] += (float)(g * env * tmp[k]);
  }
  return 0;
}

/* The voice: per note the same draws (vowel, vibrato phase, level) in both
 * voices, so the truth f0 replays them whatever the voice. */
static int sing(sg_build *b) {
  stg_song *s = b->s;
  float *tmp = NULL;
  if (s->voice == EBB_SONG_VOICE_WORDS && !(tmp = malloc((size_t)s->rate * 8 * sizeof *tmp)))
    return ebb_seterr(EBB_ENOMEM, "songgen: out of memory for a word");
  int rc = 0;
  for (size_t i = 0; i < s->n_notes && !rc; i++) {
    const stg_song_note *n = &s->notes[i];
    const double *fm = sg_formants[rng_int(&b->r, 5)];
    double vphase = 2.0 * SG_PI * rng_unit(&b->r);
    double level = 0.22 + 0.08 * rng_unit(&b->r);
    if (s->voice == EBB_SONG_VOICE_WORDS) {
      size_t wi = 0;
      while (wi + 1 < SG_NWORDS && sg_words[wi] != n->word)
        wi++;
      rc = sing_word(b, n, wi, vphase, level, s->seed * 1000003u + i, tmp);
    } else {
      sing_vowel(s, n, fm, vphase, level);
    }
  }
  free(tmp);
  return rc;
}

static void add_tone(float *x, uint64_t frames, double rate, double start, double len, double hz,
                     double gain, int harmonics, double attack) {
  uint64_t a = (uint64_t)llround(start * rate), n = (uint64_t)llround(len * rate);
  for (uint64_t k = 0; k < n && a + k < frames; k++) {
    double t = (double)k / rate;
    double env = t < attack ? t / attack : 1.0;
    if (len - t < 0.1)
      env *= (len - t) / 0.1;
    double v = 0.0;
    for (int h = 1; h <= harmonics && h * hz < rate / 2 - 200; h++)
      v += sin(2.0 * SG_PI * h * hz * t) / h;
    x[a + k] += (float)(gain * env * v);
  }
}

static void add_kick(float *x, uint64_t frames, double rate, double start) {
  uint64_t a = (uint64_t)llround(start * rate);
  double ph = 0.0;
  for (uint64_t k = 0; k < (uint64_t)(0.3 * rate) && a + k < frames; k++) {
    double t = (double)k / rate, hz = 45.0 + 90.0 * exp(-t / 0.03);
    ph += 2.0 * SG_PI * hz / rate;
    x[a + k] += (float)(0.5 * exp(-t / 0.12) * sin(ph));
  }
}

static void add_noise_hit(sg_build *b, float *x, double start, double decay, double gain,
                          double tone_hz) {
  double rate = b->s->rate;
  uint64_t a = (uint64_t)llround(start * rate), frames = b->s->frames;
  double prev = 0.0;
  for (uint64_t k = 0; k < (uint64_t)(6 * decay * rate) && a + k < frames; k++) {
    double t = (double)k / rate, n = rng_noise(&b->r), hp = n - prev;
    prev = n;
    double v = hp * 0.5;
    if (tone_hz > 0)
      v += 0.6 * sin(2.0 * SG_PI * tone_hz * t);
    x[a + k] += (float)(gain * exp(-t / decay) * v);
  }
}

/* I-V-vi-IV per bar: pad (3 chord tones, soft saw), bass on beats 1 and 3,
 * kick 1 and 3, snare 2 and 4, hi-hat on eighths. */
static void accompany(sg_build *b, int tonic) {
  stg_song *s = b->s;
  double rate = s->rate, dur = (double)s->frames / rate;
  static const int roots[4] = {0, 4, 5, 3}; /* scale degrees */
  for (int bar = 0; bar * SG_BAR_S < dur; bar++) {
    double t0 = bar * SG_BAR_S, len = fmin(SG_BAR_S, dur - t0);
    int root = roots[bar % 4];
    for (int i = 0; i < 3; i++) {
      int m = degree_midi(tonic - 12, root + 2 * i);
      add_tone(s->accomp, s->frames, rate, t0, len, midi_hz(m), 0.05, 6, 0.15);
    }
    int bass = degree_midi(tonic - 24, root);
    for (int beat = 0; beat < 4; beat++) {
      double tb = t0 + beat * SG_BEAT_S;
      if (tb >= dur)
        break;
      if (beat % 2 == 0) {
        add_tone(s->accomp, s->frames, rate, tb, fmin(0.9, dur - tb), midi_hz(bass), 0.12, 2, 0.01);
        add_kick(s->accomp, s->frames, rate, tb);
      } else {
        add_noise_hit(b, s->accomp, tb, 0.07, 0.3, 190.0);
      }
      add_noise_hit(b, s->accomp, tb, 0.015, 0.12, 0.0);
      add_noise_hit(b, s->accomp, tb + SG_BEAT_S / 2, 0.015, 0.08, 0.0);
    }
  }
}

int stg_songgen_create(const stg_songgen_params *p, stg_song **out) {
  stg_songgen_params d = p ? *p : stg_songgen_defaults();
  if (d.rate < 8000 || d.rate > 96000)
    return ebb_seterr(EBB_EINVAL, "songgen: rate %u Hz is outside 8000..96000", d.rate);
  if (!(d.seconds >= 6.0 && d.seconds <= 3600.0))
    return ebb_seterr(EBB_EINVAL, "songgen: length %g s is outside 6..3600", d.seconds);
  if (!(d.accomp_gain >= 0.0 && d.accomp_gain <= 10.0))
    return ebb_seterr(EBB_EINVAL, "songgen: accomp_gain %g is outside 0..10", d.accomp_gain);
  if (d.voice != EBB_SONG_VOICE_VOWELS && d.voice != EBB_SONG_VOICE_WORDS)
    return ebb_seterr(EBB_EINVAL, "songgen: voice %d is not vowels (0) or words (1)", d.voice);
  sg_build b = {.r = {d.seed}};
  stg_song *s = calloc(1, sizeof *s);
  if (!s)
    return ebb_seterr(EBB_ENOMEM, "songgen: out of memory");
  b.s = s;
  s->rate = d.rate;
  s->seed = d.seed;
  s->voice = d.voice;
  s->frames = (uint64_t)llround(d.seconds * d.rate);
  s->f0_hop_s = 0.01;
  s->n_f0 = (size_t)floor(d.seconds / s->f0_hop_s) + 1;
  s->mix = calloc(s->frames, sizeof(float));
  s->vocals = calloc(s->frames, sizeof(float));
  s->accomp = calloc(s->frames, sizeof(float));
  s->f0_hz = calloc(s->n_f0, sizeof(float));
  int rc = EBB_ENOMEM;
  if (!s->mix || !s->vocals || !s->accomp || !s->f0_hz) {
    ebb_seterr(rc, "songgen: out of memory for %llu samples", (unsigned long long)s->frames);
    goto fail;
  }
  int tonic = 57 + rng_int(&b.r, 7); /* A3..D#4 */
  rc = compose(&b, tonic, d.seconds);
  if (rc)
    goto fail;
  /* The vocal synthesis draws per-note vibrato phases from a stream of its
   * own so that the truth f0 can redraw them identically. */
  uint64_t sing_seed = rng_next(&b.r);
  rng main_r = b.r;
  b.r.s = sing_seed;
  if ((rc = sing(&b)))
    goto fail;
  b.r.s = sing_seed; /* replay the draws of sing() for the truth f0 */
  for (size_t i = 0; i < s->n_notes; i++) {
    const stg_song_note *n = &s->notes[i];
    (void)rng_int(&b.r, 5); /* formant choice, as in sing() */
    double vphase = 2.0 * SG_PI * rng_unit(&b.r);
    (void)rng_unit(&b.r); /* level */
    for (size_t k = (size_t)ceil(n->onset / s->f0_hop_s); k < s->n_f0; k++) {
      double t = k * s->f0_hop_s;
      if (t > n->offset)
        break;
      s->f0_hz[k] = (float)sung_hz(midi_hz(n->midi), t - n->onset, vphase);
    }
  }
  b.r = main_r;
  accompany(&b, tonic);
  float peak = 0.0f;
  for (uint64_t k = 0; k < s->frames; k++) {
    s->accomp[k] *= (float)d.accomp_gain;
    s->mix[k] = s->vocals[k] + s->accomp[k];
    peak = fmaxf(peak, fabsf(s->mix[k]));
  }
  if (peak > 0.0f) {
    float g = 0.9f / peak;
    for (uint64_t k = 0; k < s->frames; k++) {
      s->vocals[k] *= g;
      s->accomp[k] *= g;
      s->mix[k] = s->vocals[k] + s->accomp[k];
    }
  }
  *out = s;
  rc = 0;
  goto done;
fail:
  stg_song_destroy(s);
done:
  return rc;
}

void stg_song_destroy(stg_song *s) {
  if (!s)
    return;
  free(s->mix);
  free(s->vocals);
  free(s->accomp);
  free(s->notes);
  free(s->f0_hz);
  free(s);
}

static double r3(double x) { return round(x * 1000.0) / 1000.0; }

int stg_song_truth_json(const stg_song *s, char **out) {
  json_t *root = json_object(), *notes = json_array(), *phrases = json_array();
  json_t *f0 = json_object(), *hz = json_array(), *voiced = json_array();
  json_object_set_new(root, "rate", json_integer(s->rate));
  json_object_set_new(root, "duration", json_real(r3((double)s->frames / s->rate)));
  json_object_set_new(root, "seed", json_integer((json_int_t)s->seed));
  json_object_set_new(root, "tempo_bpm", json_integer(120));
  for (size_t i = 0; i < s->n_notes; i++) {
    const stg_song_note *n = &s->notes[i];
    json_array_append_new(notes, json_pack("{s:f,s:f,s:i,s:s,s:i}", "onset", r3(n->onset), "offset",
                                           r3(n->offset), "midi", n->midi, "word", n->word, "line",
                                           n->line));
    if (i + 1 == s->n_notes || s->notes[i + 1].line != n->line) {
      size_t f = i;
      while (f > 0 && s->notes[f - 1].line == n->line)
        f--;
      json_array_append_new(phrases, json_pack("{s:f,s:f}", "start", r3(s->notes[f].onset), "end",
                                               r3(n->offset)));
    }
  }
  for (size_t i = 0; i < s->n_f0; i++) {
    json_array_append_new(hz, json_real(round(s->f0_hz[i] * 100.0) / 100.0));
    json_array_append_new(voiced, json_integer(s->f0_hz[i] > 0.0f));
  }
  json_object_set_new(f0, "hop_s", json_real(s->f0_hop_s));
  json_object_set_new(f0, "hz", hz);
  json_object_set_new(f0, "voiced", voiced);
  json_object_set_new(root, "notes", notes);
  json_object_set_new(root, "phrases", phrases);
  json_object_set_new(root, "voice",
                      json_string(s->voice == EBB_SONG_VOICE_WORDS ? "words" : "vowels"));
  if (s->voice == EBB_SONG_VOICE_WORDS) {
    json_t *words = json_array();
    for (size_t i = 0; i < s->n_notes; i++) {
      const stg_song_note *n = &s->notes[i];
      json_array_append_new(words, json_pack("{s:s,s:f,s:f,s:i}", "word", n->word, "start",
                                             r3(n->onset), "end", r3(n->offset), "line", n->line));
    }
    json_object_set_new(root, "words", words);
  }
  json_object_set_new(root, "f0", f0);
  *out = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(10));
  json_decref(root);
  return *out ? 0 : ebb_seterr(EBB_ENOMEM, "songgen: out of memory for the truth JSON");
}

/* The lyrics: one line per phrase, one word per note, '\n' after each line.
 * *out is malloc'd (caller frees). */
static int stg_song_lyrics_text(const stg_song *s, char **out) {
  size_t cap = 2, len = 0;
  for (size_t i = 0; i < s->n_notes; i++)
    cap += strlen(s->notes[i].word) + 1;
  char *t = malloc(cap);
  if (!t)
    return ebb_seterr(EBB_ENOMEM, "songgen: out of memory for the lyrics");
  for (size_t i = 0; i < s->n_notes; i++) {
    size_t w = strlen(s->notes[i].word);
    memcpy(t + len, s->notes[i].word, w);
    len += w;
    int eol = i + 1 == s->n_notes || s->notes[i + 1].line != s->notes[i].line;
    t[len++] = eol ? '\n' : ' ';
  }
  t[len] = '\0';
  *out = t;
  return 0;
}

int stg_wav_write_mono(const char *path, const float *x, uint64_t frames, uint32_t rate) {
  SF_INFO info = {.samplerate = (int)rate,
                  .channels = 1,
                  .format = SF_FORMAT_WAV | SF_FORMAT_PCM_16};
  SNDFILE *f = sf_open(path, SFM_WRITE, &info);
  if (!f)
    return ebb_seterr(EBB_EIO, "%s: cannot write: %s", path, sf_strerror(NULL));
  sf_command(f, SFC_SET_CLIPPING, NULL, SF_TRUE);
  sf_count_t n = sf_writef_float(f, x, (sf_count_t)frames);
  int rc = sf_close(f);
  if (n != (sf_count_t)frames || rc != 0)
    return ebb_seterr(EBB_EIO, "%s: short write", path);
  return 0;
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f)
    return ebb_seterr(EBB_EIO, "%s: cannot write", path);
  size_t n = strlen(text);
  int bad = fwrite(text, 1, n, f) != n;
  bad |= fclose(f) != 0;
  return bad ? ebb_seterr(EBB_EIO, "%s: short write", path) : 0;
}

int stg_song_write(const stg_song *s, const char *dir, const char *base) {
  char path[4096];
  int rc;
  snprintf(path, sizeof path, "%s/%s.wav", dir, base);
  if ((rc = stg_wav_write_mono(path, s->mix, s->frames, s->rate)))
    return rc;
  snprintf(path, sizeof path, "%s/%s.vocals.wav", dir, base);
  if ((rc = stg_wav_write_mono(path, s->vocals, s->frames, s->rate)))
    return rc;
  snprintf(path, sizeof path, "%s/%s.accompaniment.wav", dir, base);
  if ((rc = stg_wav_write_mono(path, s->accomp, s->frames, s->rate)))
    return rc;
  char *text = NULL;
  if ((rc = stg_song_truth_json(s, &text)))
    return rc;
  snprintf(path, sizeof path, "%s/%s.truth.json", dir, base);
  rc = write_text(path, text);
  free(text);
  if (rc)
    return rc;
  if ((rc = stg_song_lyrics_text(s, &text)))
    return rc;
  snprintf(path, sizeof path, "%s/%s.lyrics.txt", dir, base);
  rc = write_text(path, text);
  free(text);
  return rc;
}
