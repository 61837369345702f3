# sdk_worker PATH CLASS: writes an executable Python SDK worker at PATH that
# serves the stage class CLASS, whose definition it reads from stdin (a heredoc
# in the test: `class CLASS(Stage): ...`). The interpreter is /usr/bin/python3
# when it has NumPy (what the SDK's tensors need), else the first python3; the
# worker imports ebb from this checkout's python/.
sdk_worker() {
  local py=python3 root
  /usr/bin/python3 -c 'import numpy' 2>/dev/null && py=/usr/bin/python3
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  {
    printf '#!%s\nimport os, sys\nsys.path.insert(0, "%s/python")\nfrom ebb.worker import Stage, serve\n\n' \
      "$py" "$root"
    cat
    printf '\nsys.exit(serve(%s))\n' "$2"
  } > "$1"
  chmod +x "$1"
}
