/* A generated test mix for the separation tests and bench/bench_separate.c:
 * "voice" = a sustained harmonic tone with vibrato that moves through a
 * non-repeating melody; "accompaniment" = a 2 s loop (kick, snare, hi-hat,
 * two chords) tiled exactly. Deterministic for a seed. Both stems are scaled
 * to the same RMS (0 dB voice-to-accompaniment), mix = voice + accompaniment. */
#ifndef EBB_TESTS_STAGES_SEPARATE_MIX_H
#define EBB_TESTS_STAGES_SEPARATE_MIX_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct sep_mix {
  long long n;
  unsigned rate;
  float *voice, *accomp, *mix;
} sep_mix;

static uint32_t mix_rand(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(*s >> 33);
}
static inline float mix_noise(uint64_t *s) { return (float)mix_rand(s) / 2147483648.0f - 1.0f; }

static inline double mix_rms(const float *x, long long n) {
  double e = 0;
  for (long long i = 0; i < n; i++)
    e += (double)x[i] * x[i];
  return sqrt(e / (n ? n : 1));
}

/* Returns 0, or -1 when out of memory. */
static inline int sep_mix_make(sep_mix *m, uint64_t seed, unsigned rate, double seconds) {
  m->rate = rate;
  m->n = (long long)(seconds * rate);
  m->voice = calloc((size_t)m->n, sizeof(float));
  m->accomp = calloc((size_t)m->n, sizeof(float));
  m->mix = calloc((size_t)m->n, sizeof(float));
  long long loop_n = 2 * (long long)rate;
  float *loop = calloc((size_t)loop_n, sizeof(float));
  if (!m->voice || !m->accomp || !m->mix || !loop) {
    free(loop);
    return -1;
  }
  uint64_t rs = seed * 7919 + 17;
  /* the loop: 4 beats of 0.5 s */
  for (int beat = 0; beat < 4; beat++) {
    long long b0 = beat * loop_n / 4;
    for (long long i = 0; i < loop_n / 4; i++) {
      double t = (double)i / rate;
      float v = 0;
      if (beat % 2 == 0) /* kick: falling sine */
        v += (float)(0.9 * exp(-t / 0.12) * sin(2 * M_PI * (50 + 60 * exp(-t / 0.03)) * t));
      else /* snare: noise + tone */
        v += (float)(exp(-t / 0.08) * (0.5 * mix_noise(&rs) + 0.3 * sin(2 * M_PI * 185 * t)));
      /* hi-hat on the eighths: differenced noise */
      double th = fmod(t, 0.25);
      v += (float)(0.25 * exp(-th / 0.02) * (mix_noise(&rs) - mix_noise(&rs)));
      loop[b0 + i] += v;
    }
  }
  static const double chords[2][3] = {{261.63, 329.63, 392.00}, {220.00, 261.63, 329.63}};
  for (long long i = 0; i < loop_n; i++) {
    double t = (double)i / rate;
    const double *c = chords[i < loop_n / 2 ? 0 : 1];
    double v = 0;
    for (int k = 0; k < 3; k++)
      for (int h = 1; h <= 3; h++)
        v += 0.12 / h * sin(2 * M_PI * c[k] * h * t);
    loop[i] += (float)v;
  }
  for (long long i = 0; i < m->n; i++)
    m->accomp[i] = loop[i % loop_n];
  free(loop);

  /* the voice: notes of 0.3..0.8 s from a pentatonic scale, vibrato 5.5 Hz
   * +-2 %, 8 harmonics, short rests; phase-continuous */
  static const double scale[] = {196.0, 220.0, 246.9, 293.7, 329.6, 392.0, 440.0, 493.9};
  double phase = 0;
  long long i = 0;
  while (i < m->n) {
    long long len = (long long)((0.3 + 0.5 * (mix_rand(&rs) % 1000) / 1000.0) * rate);
    double f0 = scale[mix_rand(&rs) % 8];
    long long rest = (mix_rand(&rs) % 4 == 0) ? (long long)(0.15 * rate) : 0;
    for (long long j = 0; j < len && i < m->n; j++, i++) {
      double t = (double)j / rate;
      double f = f0 * (1 + 0.02 * sin(2 * M_PI * 5.5 * t));
      phase += 2 * M_PI * f / rate;
      double env = fmin(1.0, fmin(t / 0.03, (double)(len - j) / rate / 0.03));
      double v = 0;
      for (int h = 1; h <= 8; h++)
        v += sin(h * phase) / h;
      m->voice[i] = (float)(env * v);
    }
    for (long long j = 0; j < rest && i < m->n; j++, i++)
      m->voice[i] = 0;
  }
  double rv = mix_rms(m->voice, m->n), ra = mix_rms(m->accomp, m->n);
  for (long long k = 0; k < m->n; k++) {
    m->voice[k] = (float)(m->voice[k] * 0.2 / rv);
    m->accomp[k] = (float)(m->accomp[k] * 0.2 / ra);
    m->mix[k] = m->voice[k] + m->accomp[k];
  }
  return 0;
}

static inline void sep_mix_free(sep_mix *m) {
  free(m->voice);
  free(m->accomp);
  free(m->mix);
}

/* SDR of estimate e against reference s, in dB (BSS-eval without the
 * allowed distortion filter: 10 log10 |s|^2 / |s - e|^2). */
static inline double sep_sdr(const float *s, const float *e, long long n) {
  double num = 0, den = 0;
  for (long long i = 0; i < n; i++) {
    num += (double)s[i] * s[i];
    den += ((double)s[i] - e[i]) * ((double)s[i] - e[i]);
  }
  return 10 * log10(num / (den > 1e-30 ? den : 1e-30));
}

#endif
