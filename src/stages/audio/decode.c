/* The `decode` stage (decode.h): a file read through libsndfile or
 * libmpg123, mixed to mono and resampled to the option rate. */
#include "stages/audio/decode.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <mpg123.h>
#include <pthread.h>
#include <samplerate.h>
#include <sndfile.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "ebb/error.h"
#include "ebb/stage.h"
#include "stages/audio/st_util.h"
#include "stages/options.h"

#define READ_BLOCK 4096 /* frames per read */
/* libsamplerate converts by ratios in [1/256, 256] (SRC_MAX_RATIO). */
#define MAX_RESAMPLE_RATIO 256.0

/* --- resampling ------------------------------------------------------------ */

/* What src_simple does, in blocks of RESAMPLE_BLOCK input frames so that a
 * cancellation (st_util.h) is seen between them: at 768 kHz one block is a
 * few ms of work. Answers 0, EBB_ECANCELED or libsamplerate's error number. */
#define RESAMPLE_BLOCK 4096
static int resample_blocks(const float *in, uint64_t n, double ratio, float *out, uint64_t room,
                           uint64_t *got) {
  int err = 0;
  SRC_STATE *st = src_new(SRC_SINC_MEDIUM_QUALITY, 1, &err);
  if (!st)
    return err ? err : 1; /* SRC_ERR_MALLOC_FAILED */
  uint64_t pos = 0;
  *got = 0;
  for (;;) {
    if (stg_st_stop()) {
      err = EBB_ECANCELED;
      break;
    }
    uint64_t take = n - pos < RESAMPLE_BLOCK ? n - pos : RESAMPLE_BLOCK;
    SRC_DATA d = {.data_in = in + pos,
                  .input_frames = (long)take,
                  .data_out = out + *got,
                  .output_frames = (long)(room - *got),
                  .src_ratio = ratio,
                  .end_of_input = pos + take == n};
    if ((err = src_process(st, &d)) != 0)
      break;
    pos += (uint64_t)d.input_frames_used;
    *got += (uint64_t)d.output_frames_gen;
    if ((d.end_of_input && d.output_frames_gen == 0) || *got >= room)
      break;
  }
  src_delete(st);
  return err;
}

int stg_audio_resample(const float *in, uint64_t n, uint32_t from, uint32_t to, float **out,
                       uint64_t *nout) {
  *out = NULL;
  *nout = 0;
  if (from == 0 || to == 0)
    return ebb_seterr(EBB_EINVAL, "resample: rate 0 (%u Hz -> %u Hz)", from, to);
  double ratio = (double)to / (double)from;
  if (ratio > MAX_RESAMPLE_RATIO || ratio < 1.0 / MAX_RESAMPLE_RATIO)
    return ebb_seterr(EBB_EINVAL, "resample %u Hz -> %u Hz: ratio beyond %g", from, to,
                      MAX_RESAMPLE_RATIO);
  uint64_t want = (uint64_t)llround((double)n * ratio);
  /* room for the converter's rounding; the result is trimmed or padded to
   * want in place (one buffer: at 768 kHz a 5-minute input is 0.9 GB) */
  uint64_t room = from == to ? want + 1 : want + 64;
  float *y = malloc(sizeof(float) * (size_t)room);
  if (!y)
    return ebb_seterr(EBB_ENOMEM, "resample: out of host memory for %" PRIu64 " samples", room);
  if (from == to) {
    memcpy(y, in, sizeof(float) * (size_t)n);
  } else {
    uint64_t got = 0;
    int rc = resample_blocks(in, n, ratio, y, room, &got);
    if (rc) {
      free(y);
      return rc == EBB_ECANCELED ? ebb_seterr(rc, "resample %u Hz -> %u Hz: cancelled", from, to)
                                 : ebb_seterr(EBB_EIO, "resample %u Hz -> %u Hz: libsamplerate: %s",
                                              from, to, src_strerror(rc));
    }
    for (uint64_t i = got; i < want; i++)
      y[i] = 0.0f;
  }
  *out = y;
  *nout = want;
  return 0;
}

/* --- checks ---------------------------------------------------------------- */

static int check_header(const char *path, uint32_t rate, uint32_t channels, double max_seconds,
                        int64_t frames_known, uint32_t target) {
  if (channels == 0)
    return ebb_seterr(EBB_EINPUT, "%s: the file declares 0 audio channels", path);
  if (channels > 256)
    return ebb_seterr(EBB_EINPUT, "%s: the file declares %u audio channels (at most 256)", path,
                      channels);
  if (rate == 0)
    return ebb_seterr(EBB_EINPUT, "%s: the file declares a sample rate of 0 Hz", path);
  if (rate > EBB_DECODE_MAX_RATE)
    return ebb_seterr(EBB_EINPUT, "%s: sample rate %u Hz is absurd (at most %u)", path, rate,
                      EBB_DECODE_MAX_RATE);
  if ((double)target / rate > MAX_RESAMPLE_RATIO || (double)rate / target > MAX_RESAMPLE_RATIO)
    return ebb_seterr(EBB_EINPUT,
                      "%s: sample rate %u Hz cannot be resampled to the working rate %u Hz "
                      "(ratio beyond %g)",
                      path, rate, target, MAX_RESAMPLE_RATIO);
  if (frames_known >= 0 && (double)frames_known / rate > max_seconds)
    return ebb_seterr(EBB_EINPUT, "%s: %.1f s of audio is longer than max_seconds (%g s)", path,
                      (double)frames_known / rate, max_seconds);
  return 0;
}

static uint32_t le32(const unsigned char *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint16_t le16(const unsigned char *b) { return (uint16_t)(b[0] | b[1] << 8); }

/* Reads a RIFF/WAVE header ourselves before libsndfile does, for clear
 * reasons: a fmt chunk with 0 channels or an absurd rate (libsndfile would
 * only say "unreadable"), and a data chunk that claims more bytes than the
 * file holds (libsndfile silently reads what is there). Unknown data sizes
 * (0 or 0xFFFFFFFF, written by streaming encoders) are accepted. Other
 * containers (RF64, RIFX, FLAC, ...) are left to libsndfile. */
static int check_riff(const char *path, long long file_size, double max_seconds, uint32_t target) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return ebb_seterr(EBB_EINPUT, "%s: cannot open: %s", path, strerror(errno));
  unsigned char hdr[12];
  int rc = 0;
  if (fread(hdr, 1, 12, f) != 12 || memcmp(hdr, "RIFF", 4) != 0 || memcmp(hdr + 8, "WAVE", 4) != 0)
    goto done;
  long long pos = 12;
  while (pos + 8 <= file_size) {
    unsigned char ch[8];
    if (fseek(f, (long)pos, SEEK_SET) != 0 || fread(ch, 1, 8, f) != 8)
      break;
    uint32_t size = le32(ch + 4);
    if (memcmp(ch, "fmt ", 4) == 0 && size >= 16) {
      unsigned char fmt[16];
      if (fread(fmt, 1, 16, f) != 16) {
        rc = ebb_seterr(EBB_EINPUT, "%s: truncated: the WAV fmt chunk is cut short", path);
        break;
      }
      if ((rc = check_header(path, le32(fmt + 4), le16(fmt + 2), max_seconds, -1, target)) < 0)
        break;
    } else if (memcmp(ch, "data", 4) == 0) {
      long long have = file_size - (pos + 8);
      if (size != 0 && size != 0xFFFFFFFFu && (long long)size > have)
        rc = ebb_seterr(EBB_EINPUT,
                        "%s: truncated: the WAV header claims %u bytes of audio data but the "
                        "file holds only %lld",
                        path, size, have < 0 ? 0 : have);
      break;
    }
    pos += 8 + (long long)size + (size & 1);
  }
done:
  fclose(f);
  return rc;
}

static int file_checks(const char *path, long long *size) {
  struct stat st;
  if (!path || !*path)
    return ebb_seterr(EBB_EINPUT, "decode: no input path");
  if (stat(path, &st) != 0)
    return ebb_seterr(EBB_EINPUT, "%s: cannot read: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return ebb_seterr(EBB_EINPUT, "%s: not a regular file", path);
  if (st.st_size == 0)
    return ebb_seterr(EBB_EINPUT, "%s: empty file (0 bytes)", path);
  *size = (long long)st.st_size;
  return 0;
}

/* Appends the mono mixdown of `got` interleaved frames to *buf. */
static int append_mono(float **buf, uint64_t *n, uint64_t *cap, const float *inter, uint64_t got,
                       uint32_t channels, const char *path) {
  if (*n + got > *cap) {
    uint64_t nc = *cap ? *cap * 2 : 65536;
    while (nc < *n + got)
      nc *= 2;
    float *nb = realloc(*buf, sizeof(float) * (size_t)nc);
    if (!nb)
      return ebb_seterr(EBB_ENOMEM, "%s: out of host memory for %" PRIu64 " samples", path, nc);
    *buf = nb;
    *cap = nc;
  }
  float inv = 1.0f / (float)channels;
  for (uint64_t i = 0; i < got; i++) {
    float s = 0;
    for (uint32_t c = 0; c < channels; c++)
      s += inter[i * channels + c];
    (*buf)[*n + i] = channels == 1 ? s : s * inv;
  }
  *n += got;
  return 0;
}

static int finish(const char *path, float *mono, uint64_t n, uint32_t src_rate, uint32_t rate,
                  float **out, uint64_t *frames) {
  if (n == 0) {
    free(mono);
    return ebb_seterr(EBB_EINPUT, "%s: empty: the file holds no audio frames", path);
  }
  int rc = stg_audio_resample(mono, n, src_rate, rate, out, frames);
  free(mono);
  if (rc < 0)
    return ebb_errctx(rc, "%s: ", path);
  if (*frames == 0) { /* shorter than one sample at the working rate */
    free(*out);
    *out = NULL;
    return ebb_seterr(EBB_EINPUT,
                      "%s: too short: %" PRIu64 " frames at %u Hz are less than one sample at "
                      "%u Hz",
                      path, n, src_rate, rate);
  }
  return 0;
}

/* --- libmpg123 ------------------------------------------------------------- */

static pthread_once_t mpg123_once = PTHREAD_ONCE_INIT;
static int mpg123_init_rc;
static void mpg123_init_once(void) { mpg123_init_rc = mpg123_init(); }

/* Reads the whole stream as mono at its own rate into *mono (grown; the caller frees it
 * on every path), refusing more than max_seconds and a format change mid-stream. */
static int mpg123_read_all(mpg123_handle *mh, const char *path, long src_rate, int channels,
                           double max_seconds, float **mono, uint64_t *n) {
  uint64_t cap = 0;
  int rc = 0;
  size_t bytes = sizeof(float) * READ_BLOCK * (size_t)channels;
  float *buf = malloc(bytes);
  if (!buf)
    return ebb_seterr(EBB_ENOMEM, "%s: out of host memory", path);
  uint64_t limit = (uint64_t)(max_seconds * (double)src_rate) + 1;
  for (;;) {
    if (stg_st_stop()) {
      rc = ebb_seterr(EBB_ECANCELED, "%s: cancelled after %" PRIu64 " frames", path, *n);
      break;
    }
    size_t done_bytes = 0;
    int r = mpg123_read(mh, buf, bytes, &done_bytes);
    uint64_t got = done_bytes / (sizeof(float) * (size_t)channels);
    if (got && (rc = append_mono(mono, n, &cap, buf, got, (uint32_t)channels, path)) < 0)
      break;
    if (*n > limit) {
      rc = ebb_seterr(EBB_EINPUT, "%s: more than max_seconds (%g s) of audio", path, max_seconds);
      break;
    }
    if (r == MPG123_DONE)
      break;
    if (r == MPG123_NEW_FORMAT) {
      long r2;
      int c2, e2;
      mpg123_getformat(mh, &r2, &c2, &e2);
      if (r2 != src_rate || c2 != channels) {
        rc = ebb_seterr(EBB_EINPUT,
                        "%s: the MP3 changes format mid-stream (%ld Hz %d ch -> %ld Hz %d ch)",
                        path, src_rate, channels, r2, c2);
        break;
      }
      continue;
    }
    if (r != MPG123_OK) {
      rc = ebb_seterr(EBB_EINPUT, "%s: MP3 decoding failed after %" PRIu64 " frames: %s", path, *n,
                      mpg123_strerror(mh));
      break;
    }
  }
  free(buf);
  return rc;
}

int stg_audio_decode_mpg123(const char *path, uint32_t rate, double max_seconds, float **out,
                            uint64_t *frames, stg_decode_info *info) {
  *out = NULL;
  *frames = 0;
  long long fsize;
  int rc = file_checks(path, &fsize);
  if (rc < 0)
    return rc;
  pthread_once(&mpg123_once, mpg123_init_once);
  if (mpg123_init_rc != MPG123_OK)
    return ebb_seterr(EBB_ENOLIB, "%s: libmpg123 failed to initialise: %s", path,
                      mpg123_plain_strerror(mpg123_init_rc));
  int err = MPG123_OK;
  mpg123_handle *mh = mpg123_new(NULL, &err);
  if (!mh)
    return ebb_seterr(EBB_ENOMEM, "%s: libmpg123: %s", path, mpg123_plain_strerror(err));
  float *mono = NULL;
  uint64_t n = 0;
  long src_rate = 0;
  int channels = 0, enc = 0;
  mpg123_param(mh, MPG123_ADD_FLAGS, MPG123_FORCE_FLOAT, 0.0);
  mpg123_param(mh, MPG123_ADD_FLAGS, MPG123_QUIET, 0.0);
  mpg123_param(mh, MPG123_VERBOSE, 0, 0.0);
  if (mpg123_open(mh, path) != MPG123_OK) {
    rc = ebb_seterr(EBB_EINPUT, "%s: cannot open as MP3: %s", path, mpg123_strerror(mh));
    goto done;
  }
  if (mpg123_getformat(mh, &src_rate, &channels, &enc) != MPG123_OK) {
    rc = ebb_seterr(EBB_EINPUT, "%s: not a readable MP3 (no MPEG audio frame found): %s", path,
                    mpg123_strerror(mh));
    goto done;
  }
  if (enc != MPG123_ENC_FLOAT_32) {
    rc = ebb_seterr(EBB_EIO, "%s: libmpg123 did not give float samples (encoding 0x%x)", path, enc);
    goto done;
  }
  if ((rc = check_header(path, (uint32_t)src_rate, (uint32_t)channels, max_seconds, -1, rate)) < 0)
    goto done;
  /* Fix the output format so a stream that changes it mid-way is refused. */
  mpg123_format_none(mh);
  mpg123_format(mh, src_rate, channels, MPG123_ENC_FLOAT_32);
  if ((rc = mpg123_read_all(mh, path, src_rate, channels, max_seconds, &mono, &n)) < 0)
    goto done;
  if (info) {
    info->rate = (uint32_t)src_rate;
    info->channels = (uint32_t)channels;
    info->frames = n;
    info->via = "libmpg123";
  }
  rc = finish(path, mono, n, (uint32_t)src_rate, rate, out, frames);
  mono = NULL;
done:
  free(mono);
  mpg123_close(mh);
  mpg123_delete(mh);
  return rc;
}

/* --- libsndfile ------------------------------------------------------------ */

static int looks_like_mp3(const char *path) {
  const char *dot = strrchr(path, '.');
  if (dot && strcasecmp(dot, ".mp3") == 0)
    return 1;
  unsigned char b[3] = {0};
  FILE *f = fopen(path, "rb");
  if (!f)
    return 0;
  size_t got = fread(b, 1, 3, f);
  fclose(f);
  return got == 3 && (memcmp(b, "ID3", 3) == 0 || (b[0] == 0xFF && (b[1] & 0xE0) == 0xE0));
}

/* Every frame of sf, mixed to mono, into *mono (*n frames; the caller
 * frees it on any answer): 0, or an error naming path (cancelled, out of
 * memory, a read that failed). */
static int read_mono(SNDFILE *sf, const SF_INFO *sfi, const char *path, float **mono, uint64_t *n) {
  uint64_t cap = 0;
  float *buf = malloc(sizeof(float) * READ_BLOCK * (size_t)sfi->channels);
  if (!buf)
    return ebb_seterr(EBB_ENOMEM, "%s: out of host memory", path);
  int rc = 0;
  for (;;) {
    if (stg_st_stop()) {
      rc = ebb_seterr(EBB_ECANCELED, "%s: cancelled after %" PRIu64 " frames", path, *n);
      break;
    }
    sf_count_t got = sf_readf_float(sf, buf, READ_BLOCK);
    if (got <= 0)
      break;
    if ((rc = append_mono(mono, n, &cap, buf, (uint64_t)got, (uint32_t)sfi->channels, path)) < 0)
      break;
  }
  free(buf);
  if (rc == 0 && sf_error(sf) != SF_ERR_NO_ERROR)
    rc = ebb_seterr(EBB_EINPUT, "%s: read failed after %" PRIu64 " frames: %s", path, *n,
                    sf_strerror(sf));
  return rc;
}

int stg_audio_decode(const char *path, uint32_t rate, double max_seconds, float **out,
                     uint64_t *frames, stg_decode_info *info) {
  *out = NULL;
  *frames = 0;
  if (rate < 1000 || rate > EBB_DECODE_MAX_RATE)
    return ebb_seterr(EBB_EINVAL, "decode: working rate %u Hz out of range (1000..%u)", rate,
                      EBB_DECODE_MAX_RATE);
  if (!(max_seconds > 0))
    return ebb_seterr(EBB_EINVAL, "decode: max_seconds must be > 0 (got %g)", max_seconds);
  long long fsize;
  int rc = file_checks(path, &fsize);
  if (rc < 0)
    return rc;
  if ((rc = check_riff(path, fsize, max_seconds, rate)) < 0)
    return rc;
  SF_INFO sfi;
  memset(&sfi, 0, sizeof sfi);
  SNDFILE *sf = sf_open(path, SFM_READ, &sfi);
  if (!sf) {
    const char *why = sf_strerror(NULL);
    if (looks_like_mp3(path))
      return stg_audio_decode_mpg123(path, rate, max_seconds, out, frames, info);
    return ebb_seterr(EBB_EINPUT, "%s: unreadable audio file: %s", path, why);
  }
  float *mono = NULL;
  uint64_t n = 0;
  int major = sfi.format & SF_FORMAT_TYPEMASK;
  if ((rc = check_header(path, (uint32_t)(sfi.samplerate < 0 ? 0 : sfi.samplerate),
                         (uint32_t)(sfi.channels < 0 ? 0 : sfi.channels), max_seconds, sfi.frames,
                         rate)) < 0)
    goto done;
  if (sfi.frames == 0) {
    rc = ebb_seterr(EBB_EINPUT, "%s: empty: the file holds no audio frames", path);
    goto done;
  }
  if ((rc = read_mono(sf, &sfi, path, &mono, &n)) < 0)
    goto done;
  /* Compressed formats whose length is only an estimate (MPEG) may differ;
   * anything else that delivers fewer frames than it declares is cut short. */
  if (major != SF_FORMAT_MPEG && sfi.frames > 0 && n < (uint64_t)sfi.frames) {
    rc = ebb_seterr(EBB_EINPUT,
                    "%s: truncated: the header declares %lld frames, the file holds %" PRIu64, path,
                    (long long)sfi.frames, n);
    goto done;
  }
  if ((double)n / sfi.samplerate > max_seconds) {
    rc = ebb_seterr(EBB_EINPUT, "%s: %.1f s of audio is longer than max_seconds (%g s)", path,
                    (double)n / sfi.samplerate, max_seconds);
    goto done;
  }
  if (info) {
    info->rate = (uint32_t)sfi.samplerate;
    info->channels = (uint32_t)sfi.channels;
    info->frames = n;
    info->via = "libsndfile";
  }
  rc = finish(path, mono, n, (uint32_t)sfi.samplerate, rate, out, frames);
  mono = NULL;
done:
  free(mono);
  sf_close(sf);
  return rc;
}

int stg_audio_probe_seconds(const char *path, double *seconds, uint32_t *rate) {
  SF_INFO sfi;
  memset(&sfi, 0, sizeof sfi);
  SNDFILE *sf = sf_open(path, SFM_READ, &sfi);
  if (!sf)
    return ebb_seterr(EBB_EINPUT, "%s: no audio header libsndfile reads", path);
  sf_close(sf);
  if (sfi.samplerate <= 0 || sfi.frames < 0)
    return ebb_seterr(EBB_EINPUT, "%s: absurd header (%d Hz)", path, sfi.samplerate);
  *seconds = (double)sfi.frames / sfi.samplerate;
  *rate = (uint32_t)sfi.samplerate;
  return 0;
}

/* --- the stage ------------------------------------------------------------- */

typedef struct dec_state {
  uint32_t rate;
  double max_seconds;
} dec_state;

/* The options, each written once (stages/options.h). */
#define DEC_OPTIONS(NUM, INT, STR, BOOL, SEP, OP_NUM, OP_INT, PATH, URL, SECRET) \
  INT(rate, 16000, 1000, 768000, "working sample rate in Hz (mono)")             \
  SEP OP_NUM(max_seconds, 900, 0.001, 86400, "longest input accepted, seconds")
EBB_STAGE_OPTIONS(DEC_OPTIONS)
_Static_assert(EBB_DECODE_MAX_RATE == 768000, "decode: the rate option's maximum");

static int dec_fail(ebb_stage_ctx *ctx, int rc) {
  ebb_set_error(ctx, rc, ebb_errmsg());
  return rc;
}

static int dec_load(ebb_stage_ctx *ctx, const char *options_json, void **state) {
  dec_state *st = calloc(1, sizeof *st);
  if (!st)
    return ebb_set_error(ctx, EBB_ENOMEM, "decode: out of host memory");
  json_t *root;
  stage_opts v;
  int rc = stage_opts_parse("decode", options_json, &root, &v);
  json_decref(root);
  if (!rc) {
    st->rate = (uint32_t)v.rate;
    st->max_seconds = v.max_seconds;
  }
  if (rc < 0) {
    free(st);
    return dec_fail(ctx, rc);
  }
  *state = st;
  return 0;
}

static int dec_run(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  dec_state *st = state;
  ebb_item_info it;
  memset(&it, 0, sizeof it);
  it.size = sizeof it;
  if (ctx->host->item_find(in, "input", &it) < 0 || it.kind != EBB_ITEM_FILE || !it.text)
    return ebb_set_error(ctx, EBB_EINPUT, "decode: the job has no FILE item \"input\"");
  float *pcm = NULL;
  uint64_t n = 0;
  stg_decode_info info;
  memset(&info, 0, sizeof info);
  stg_st_watch(ctx); /* its read and resampling loops see a cancellation */
  int rc = stg_audio_decode(it.text, st->rate, st->max_seconds, &pcm, &n, &info);
  stg_st_unwatch();
  if (rc < 0)
    return dec_fail(ctx, rc);
  rc = ctx->host->add_audio(out, "audio", pcm, n, 1, st->rate);
  free(pcm);
  if (rc < 0)
    return dec_fail(ctx, ebb_errctx(rc, "decode: adding \"audio\": "));
  char msg[768];
  snprintf(msg, sizeof msg, "%s: %.2f s, %u Hz x %u ch via %s -> %u Hz mono", it.text,
           (double)info.frames / info.rate, info.rate, info.channels, info.via, st->rate);
  ebb_stage_log(ctx, 1, msg);
  return 0;
}

/* Work (the stage ABI's `work`): reading and mixing down cost DEC_READ_S
 * per second of input; resampling (libsamplerate, SRC_SINC_MEDIUM_QUALITY),
 * when the file's rate is not `rate`, DEC_RESAMPLE_S per second of input
 * per kHz of the higher of the two rates (a file of unknown rate counts as
 * 48 kHz). Measured with `ebb run --device cpu --set decode.rate=R` on
 * songgen's 16 kHz song repeated to 60 and 300 s, one core of the 2-core
 * development machine (wall "done in" of the stage, shared machine): no
 * resampling 0.43 s / 300 s (0.0014 s/s); 16 -> 8 kHz 0.68 s / 60 s; 16 ->
 * 48 kHz 2.14 s / 60 s (0.036 s/s); 44.1 -> 16 kHz 2.40 s / 61.7 s (0.039
 * s/s); 16 -> 192 kHz 96.6 s / 300 s (0.32 s/s, the slowest figure, under
 * contention). 0.00075 s/s per kHz gives 0.036 at 48 kHz, 0.14 at 192 kHz.
 * Inputs longer than max_seconds are refused at once: they count as
 * max_seconds. */
#define DEC_READ_S 0.0015
#define DEC_RESAMPLE_S 0.00075
double stg_audio_resample_work_s(double input_s, uint32_t from, uint32_t to) {
  double src = from ? from : 48000.0, hi = src > to ? src : to;
  return from == to ? 0.0 : input_s * DEC_RESAMPLE_S * hi / 1000.0;
}

double stg_decode_work_s(double input_s, uint32_t src_rate, uint32_t rate, double max_seconds) {
  double s = input_s < max_seconds ? input_s : max_seconds;
  return s * DEC_READ_S + stg_audio_resample_work_s(s, src_rate, rate);
}

static int dec_work(const ebb_host_api *host, const char *options_json, double input_s,
                    ebb_work *out) {
  (void)host;
  json_t *root;
  stage_opts v;
  int rc = stage_opts_parse("decode", options_json, &root, &v);
  json_decref(root);
  if (rc)
    return rc;
  out->cpu_s = stg_decode_work_s(input_s, out->input_rate, (uint32_t)v.rate, v.max_seconds);
  snprintf(out->drivers, sizeof out->drivers, "rate %d", v.rate);
  return 0;
}

static void dec_unload(ebb_stage_ctx *ctx, void *state) {
  (void)ctx;
  free(state);
}

const ebb_stage stg_stage_decode = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "decode",
    .version = 1,
    .description = "audio file (WAV, FLAC, OGG, MP3) -> mono float PCM at the working rate",
    .options_schema = stage_opts_schema,
    .needs_gpu = 0,
    .load = dec_load,
    .run = dec_run,
    .unload = dec_unload,
    .release = NULL,
    .work = dec_work,
};
