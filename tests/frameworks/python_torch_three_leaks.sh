#!/usr/bin/env bash
# The three leaks of a PyTorch audio service (examples/torch/three_leaks.py):
# a module-level dict of models keyed by device, a model kept as a function's
# attribute, PyTorch's caching allocator. In both modes (ebb.on_release hooks
# + ebb.release(); ebb.torch.use() + an owner's release()) fakegpu-smi, a
# separate process, shows the memory held after each stage and its drop, and
# the figure ebb prints equals the drop; in owners mode the cached models are
# reported as leaks naming the example's line that built them.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}" "${EBB_LIBCUDA:?}"
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/frameworks.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
need_python "$TORCH_PY" torch
EX=$EBB_SOURCE_DIR/examples/torch/three_leaks.py
build_line=$(grep -n '^ *return model.to(device)  #' "$EX" | cut -d: -f1)
[ -n "$build_line" ] || fail "cannot find build_model's .to(device) line in $EX"
ran=""
for mode in hooks owners; do
  fw_python "$TORCH_PY" "$EX" "$mode" --mib 256 > "$T/$mode.log" 2>&1
  rc=$?
  sed "s/^/$mode: /" "$T/$mode.log"
  if [ $rc -ne 0 ]; then
    fail "three_leaks.py $mode exited $rc"
    continue
  fi
  ran="$ran $mode"
  for stage in separate transcribe pitch; do
    held=$(sed -n "s/^\[$stage\] held \([0-9]*\) MiB after the stage (nvidia-smi)\$/\1/p" "$T/$mode.log")
    n=$(sed -n "s/^\[$stage\] released \([0-9]*\) MiB of GPU memory\$/\1/p" "$T/$mode.log")
    drop=$(sed -n "s/^\[$stage\] nvidia-smi: [0-9]* -> [0-9]* MiB (-\([0-9]*\))\$/\1/p" "$T/$mode.log")
    if [ -z "$held" ] || [ -z "$n" ] || [ -z "$drop" ]; then
      fail "$mode/$stage: held '$held', released '$n', drop '$drop' missing"
      continue
    fi
    # each stage holds at least its 256 MiB model or temporaries
    [ "$drop" -ge 250 ] || fail "$mode/$stage: fakegpu-smi saw only $drop MiB go"
    d=$((n - drop)); [ ${d#-} -le 2 ] || fail "$mode/$stage: ebb says $n MiB, fakegpu-smi saw $drop MiB go"
  done
done
# owners mode: the two cached models are leaks at the example's line
if [[ " $ran " == *" owners "* ]]; then
  for stage in separate transcribe; do
    grep -q "^\[$stage\]   .* at $EX:$build_line\$" "$T/owners.log" ||
      fail "owners: no leak of [$stage] reported at $EX:$build_line"
  done
  grep -q "^\[pitch\] leaked" "$T/owners.log" && fail "owners: pitch's freed temporaries reported as a leak"
fi
[ $fails -eq 0 ] && echo "python_torch_three_leaks: ok"
exit $((fails > 0))
