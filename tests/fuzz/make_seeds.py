#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/ (run from anywhere; the
files are committed, so this only needs rerunning to change them). Seeds are
small valid and invalid examples of each input; crash-* files are kept."""
import hashlib, json, math, os, struct, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
C = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(C, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- config -----------------------------------------------------------------
put("config", "design-example.json",
    '{"pipelines": {"NAME": {"stages": [{"stage": "synthetic", "name": "a", '
    '"options": {"weights_mib": 64}, "isolate": false}], "release": "after-stage"}}}')
for f in sorted(os.listdir(os.path.join(ROOT, "examples", "configs"))):
    with open(os.path.join(ROOT, "examples", "configs", f), "rb") as fh:
        put("config", "example-" + f, fh.read())
put("config", "all-keys.json", json.dumps({
    "plugin_dirs": ["rel/dir", "/abs/dir"],
    "server": {"listen": "127.0.0.1:8470"},
    "pipelines": {
        "songtrace": {"description": "override", "release": "idle:30", "stages": [
            {"stage": "decode", "options": {"rate": 22050, "max_seconds": 60}},
            {"stage": "transcribe", "name": "asr", "timeout_s": 30, "cache": False,
             "isolate": False, "options": {}}]},
        "p2": {"release": "never", "stages": [{"stage": "pitch"}, {"stage": "export"}]},
        "p3": {"release": "after-job", "stages": [{"stage": "unknown-plugin", "options": {"x": [1, {"y": None}]}}]}}}))
put("config", "bad-dup-names.json",
    '{"pipelines": {"p": {"stages": [{"stage": "synthetic"}, {"stage": "synthetic"}]}}}')
put("config", "bad-unknown-key.json", '{"pipelines": {"p": {"stages": [{"stage": "a", "bogus": 1}]}}}')
put("config", "bad-release.json", '{"pipelines": {"p": {"release": "idle:-1", "stages": [{"stage": "a"}]}}}')
put("config", "bad-types.json",
    '{"pipelines": {"p": {"stages": [{"stage": "synthetic", "options": {"weights_mib": "x"}, "timeout_s": 0}]}}}')
put("config", "bad-syntax.json", '{"pipelines": {"p": {"stages": [\n{"stage": "a",}]}}')
put("config", "bad-dup-key.json", '{"pipelines": {}, "pipelines": {}}')
put("config", "top-array.json", '[1, 2, 3]')
put("config", "empty.json", '')
put("config", "wrong-options.json",
    '{"pipelines": {"p": {"stages": [{"stage": "decode", "options": {"rate": 1.0e300}}, '
    '{"stage": "pitch", "options": {"hop": 256.5, "n_fft": true}}]}}}')

# --- options: byte 0 = stage index (decode separate transcribe align pitch export synthetic)
opts = [
    {}, {"rate": 16000, "max_seconds": 900}, {"rate": 8000.0}, {"rate": "x"}, {"unknown": 1},
    {"weights_mib": 64, "activations_mib": 8, "cache_mib": 1, "leak_mib": 0, "fail": "run",
     "run_ms": 1}, {"hop": 256, "n_fft": 2048, "vocal_low_hz": 80, "vocal_high_hz": 1000},
    {"hpss": True, "repeats": 3}, {"similarity_pool": [1, 2]}, {"rate": 1e30},
]
for i in range(7):
    for j, o in enumerate(opts):
        if (i + j) % 3 == 0 or j < 2:
            put("options", "stage%d-%d.json" % (i, j), bytes([i]) + json.dumps(o).encode())
put("options", "not-object", bytes([0]) + b"[1,2]")
put("options", "null", bytes([6]) + b"null")

# --- policy -------------------------------------------------------------------
for i, p in enumerate(["after-stage", "after-job", "never", "idle:0", "idle:30", "idle:1.5",
                       "idle:", "idle:-1", "idle:1e400", "idle:nan", "idle: 5", "after-stage ",
                       "idle:0x10", "idle:inf", "", "sleep", "sleep:0", "sleep:30",
                       "sleep:-1", "sleep:", "sleep:1e400"]):
    put("policy", "p%02d" % i, p)

# --- transcribe (byte 0: 0 openai, 1 whispercpp, 2 auto /inference, 3 auto openai URL)
openai = ('{"task":"transcribe","language":"english","duration":3.0,"text":" Hello world",'
          '"segments":[{"id":0,"start":0.0,"end":2.0,"text":" Hello world"}],'
          '"words":[{"word":" Hello","start":0.5,"end":0.9},{"word":" world","start":1.0,"end":1.4567}]}')
wcpp_words = ('{"task":"transcribe","language":"english","duration":4.0,"text":" And so my fellow Americans.",'
              '"segments":[{"id":0,"text":" And so my","start":0.0,"end":1.5,"tokens":[50364,400,370],'
              '"words":[{"word":" And","start":0.1,"end":0.4},{"word":" so","start":0.5,"end":0.7,"t_dtw":-1},'
              '{"word":" my","start":0.8,"end":1.1}]},{"id":1,"text":" fellow Americans.","start":1.5,"end":4.0,'
              '"tokens":[1,2,3],"words":[{"word":" fel","start":1.5,"end":1.7},{"word":"low","start":1.7,"end":2.0},'
              '{"word":" Americ","start":2.1,"end":2.6},{"word":"ans","start":2.6,"end":3.1},{"word":".","start":3.1,"end":3.1}]}]}')
wcpp_tokens = ('{"text":" Hi there","language":"en","segments":[{"t0":0,"t1":250,"text":" Hi there","tokens":['
               '{"text":" Hi","t0":12,"t1":40},{"text":" the","t0":50,"t1":80},'
               '{"text":"re","t0":80,"t1":120},{"text":"[_TT_125]","t0":125,"t1":125}]},'
               '{"offsets":{"from":2500,"to":3000},"text":" ok","tokens":['
               '{"text":" ok","offsets":{"from":2600,"to":2900}}]}]}')
bad_times = ('{"text":"a b c d e","words":[{"word":"a","start":0,"end":0.1},'
             '{"word":"b","start":-1,"end":0.2},{"word":"c","start":0.5,"end":0.3},'
             '{"word":"d","start":"x","end":0.9},{"word":"e","start":1,"end":1.1}],"segments":[]}')
for sel in range(4):
    put("transcribe", "openai-%d" % sel, bytes([sel]) + openai.encode())
    put("transcribe", "wcpp-words-%d" % sel, bytes([sel]) + wcpp_words.encode())
    put("transcribe", "wcpp-tokens-%d" % sel, bytes([sel]) + wcpp_tokens.encode())
put("transcribe", "bad-times", bytes([0]) + bad_times.encode())
put("transcribe", "bad-times-wcpp", bytes([1]) + bad_times.encode())
for i, b in enumerate(['{"text": "hi",\n  "words": [', '{"text": NaN}', '{"segments": []}',
                       '{"text": "hi"}', '{"text": "hi", "segments": 3}',
                       '{"error": "failed to read WAV file"}', '{"error": {"message": "bad model"}}',
                       '{"text":"\\u00e9t\\u00e9","words":[{"word":"\\u00e9t\\u00e9","start":0,"end":1e300}]}',
                       '[]', '']):
    put("transcribe", "err-%d" % i, bytes([i % 4]) + b.encode())

# --- cache (byte 0 bit 0 clear: harness appends the SHA-256) --------------------
def u32(v): return struct.pack("<I", v)
def u64(v): return struct.pack("<Q", v)
def item(kind, name, payload):
    return u32(kind) + u32(len(name)) + name + payload
AUDIO, TENSOR, JSON_, FILE_ = 1, 2, 3, 4  # include/ebb/stage.h ebb_item_kind
def entry(items):
    return b"EBBCACHE" + u32(1) + u32(len(items)) + b"".join(items)
audio = item(AUDIO, b"audio", u64(3) + u32(2) + u32(16000) + struct.pack("<6f", 0, .5, -.5, 1, 0, 0))
tensor = item(TENSOR, b"t", u32(2) + u64(2) + u64(3) + struct.pack("<6f", *range(6)))
tensor0 = item(TENSOR, b"scalar", u32(0) + struct.pack("<f", 7))
jsn = item(JSON_, b"transcript", u64(13) + b'{"text":"hi"}')
fil = item(FILE_, b"midi", u32(8) + b"out.midi" + u64(4) + b"MThd")
ents = {"audio": [audio], "tensor": [tensor, tensor0], "json": [jsn], "file": [fil],
        "all": [audio, tensor, jsn, fil], "empty": []}
for k, v in ents.items():
    put("cache", "entry-" + k, b"\0" + entry(v))
full = entry([audio, jsn])
put("cache", "raw-with-checksum", b"\1" + full + hashlib.sha256(full).digest())
put("cache", "raw-bad-checksum", b"\1" + full + b"\0" * 32)
put("cache", "truncated", b"\1" + b"EBBCACHE" + u32(1))
put("cache", "bad-kind", b"\0" + entry([item(9, b"x", b"")]))
put("cache", "huge-count", b"\0" + b"EBBCACHE" + u32(1) + u32(0xFFFFFFFF))
put("cache", "huge-tensor", b"\0" + entry([item(TENSOR, b"t", u32(8) + u64(1 << 40) * 8)]))
put("cache", "file-slash", b"\0" + entry([item(FILE_, b"f", u32(6) + b"../x.y" + u64(0))]))

# --- decode: tiny WAVs --------------------------------------------------------
def wav(fmt_tag, ch, rate, bits, data, extra_chunks=b"", data_size=None):
    block = ch * bits // 8
    fmt = struct.pack("<HHIIHH", fmt_tag, ch, rate, rate * block, block, bits)
    ds = len(data) if data_size is None else data_size
    body = b"WAVE" + b"fmt " + u32(len(fmt)) + fmt + extra_chunks + b"data" + u32(ds) + data
    return b"RIFF" + u32(len(body)) + body
pcm16 = b"".join(struct.pack("<h", int(8000 * math.sin(i / 5))) for i in range(200))
put("decode", "mono16.wav", wav(1, 1, 16000, 16, pcm16))
put("decode", "stereo8k.wav", wav(1, 2, 8000, 16, pcm16))
put("decode", "float44k.wav", wav(3, 1, 44100, 32, b"".join(struct.pack("<f", math.sin(i / 7)) for i in range(150))))
put("decode", "u8.wav", wav(1, 1, 11025, 8, bytes(range(0, 250, 2))))
put("decode", "list-chunk.wav", wav(1, 1, 16000, 16, pcm16[:64], extra_chunks=b"LIST" + u32(5) + b"abcde" + b"\0"))
put("decode", "truncated-data.wav", wav(1, 1, 16000, 16, pcm16[:40], data_size=4000))
put("decode", "zero-channels.wav", wav(1, 0, 16000, 16, pcm16[:40]))
put("decode", "absurd-rate.wav", wav(1, 1, 4000000, 16, pcm16[:40]))
put("decode", "low-rate.wav", wav(1, 1, 100, 16, pcm16[:40]))
put("decode", "streaming-size.wav", wav(1, 1, 16000, 16, pcm16[:80], data_size=0xFFFFFFFF))
put("decode", "empty-data.wav", wav(1, 1, 16000, 16, b""))
put("decode", "not-audio.txt", b"hello, this is not audio\n")
put("decode", "id3-junk.mp3", b"ID3\x03\x00\x00\x00\x00\x00\x0a" + b"\0" * 10 + b"\xff\xfb\x90\x00" + b"\0" * 100)

# --- ledger: op programs (see fuzz_ledger.c: op byte % 14, then arguments) -------
# owner "job p" ; owner "stage a" child ; alloc small ; alloc large ; mark ; trim ; json ;
# free ; free bad ; reclaim ; release ; destroy ; pinned ; quota ; lookup
prog = bytes([0, 5]) + b"job p" + bytes([0,
              0, 7]) + b"stage a" + bytes([0x80,
              1, 1, 0, 0x10, 0x02,          # alloc owner1 small
              2, 0, 1, 0x00, 0x00, 0x08,    # alloc owner0 class1
              1, 1, 2, 0x00, 0x00, 0x30,    # alloc owner1 class2 (large)
              6, 9]) + b"sep start" + bytes([
              13, 0, 5, 10, 3, 1, 4, 0, 0x10, 0, 4, 1, 0x44, 0x33, 0x22, 0x11, 5,
              9, 1, 1, 1, 1, 3, 0x00, 0x00, 0x10, 12, 0, 0, 12, 1, 0,
              8, 1, 11, 10, 7, 0, 10, 2, 1, 2, 0, 0, 0, 10])
put("ledger", "program-basic", prog)
put("ledger", "program-utf8-names", bytes([0, 7]) + "é✓ü".encode() + bytes([0, 1, 0, 0, 0x10, 0, 6, 4]) + "näh".encode() + bytes([10]))
put("ledger", "program-many", bytes([0, 1, 65, 0]) + bytes([1, 0, 3, 0, 4]) * 40 + bytes([5, 10]) + bytes([3, 0]) * 20 + bytes([11, 10]))
put("ledger", "empty", b"")
