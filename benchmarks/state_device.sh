#!/usr/bin/env bash
# Issue 19 on the H200 machine, from a copy of the branch (the device tool's carried folder):
#   bash benchmarks/state_device.sh
# The state check alone five times in one process (what it read, what it named as not readable,
# its time; a recording of NVML's answers and the sysfs files it read), `gpuval-agent run --checks
# state` with an evidence bundle, the state GPU tests, and the default run's wall time with the
# state check first. Everything under $OUT; each step under its own limit, 225 s in all.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:api/src:agent/src:.
budget() { local left=$((225 - SECONDS)); [ "$left" -lt "$1" ] && echo "$((left > 5 ? left : 5))" || echo "$1"; }
step() { # step NAME LIMIT COMMAND...: log to $OUT/NAME.log, report its exit code and time
  local name=$1 limit=$2; shift 2
  local began=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  echo "== $name: exit $? in $((SECONDS - began)) s" | tee -a "$OUT/summary.log"
}
nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv >>"$OUT/summary.log" 2>&1
step probe "$(budget 40)" python3 benchmarks/state_probe.py --out "$OUT/state-probe.json" \
  --record "$OUT/h200-state-recording.json" --repeat 5
step run_state "$(budget 30)" python3 -m gpuval_agent.cli run --checks state \
  --json "$OUT/run-state.json" --evidence "$OUT/state-evidence.json.gz"
step pytest "$(budget 60)" python3 -m pytest -m gpu tests/gpu/test_gpu_state.py -q -s -rA \
  -p no:cacheprovider
began=$(python3 -c 'import time; print(time.time())')
step run_default "$(budget 100)" python3 -m gpuval_agent.cli run --json "$OUT/run-default.json"
echo "run_default process wall $(python3 -c "import time; print(round(time.time() - $began, 2))") s" \
  | tee -a "$OUT/summary.log"
tail -n 40 "$OUT/probe.log" "$OUT/run_state.log" "$OUT/pytest.log" "$OUT/run_default.log"
