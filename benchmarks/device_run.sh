#!/usr/bin/env bash
# Runs on the H200 machine through the device tool, from the repository root:
#   bash benchmarks/device_run.sh smoke|full|check|issue9|b7|final|fabric|probe10|final10|memtest|baseline|inuse|train|h100|h100check
# Installs the carried wheels (.whl: pydantic and its needs, absent there), then the GPU tests,
# the benchmark and `gpuval-agent run` itself, writing everything under $OUT. Each step runs
# under its own time limit and the script goes on after a failed step.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:api/src:agent/src
MODE=${1:-smoke}
now() { python3 -c 'import time; print(time.time())'; }
since() { python3 -c "import time; print(round(time.time() - $1, 2))"; }
step() { # step NAME LIMIT COMMAND...: log to $OUT/NAME.log, report its exit code and time
  local name=$1 limit=$2; shift 2
  local began=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  echo "== $name: exit $? in $((SECONDS - began)) s"
}
{
  nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
  nvidia-smi topo -m
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
} >"$OUT/summary.log" 2>&1
if [ "$MODE" = fabric ]; then
  # Issue 10 in one call of at most 9 minutes, 7 files under $OUT: the fabric over sockets beside
  # plain torch.distributed (fabric_bench), the GPU tests, nccl-tests built from .ref/nccl-tests
  # against the wheel's NCCL, then the in-node NCCL sweep: agent / lean reference / nccl-tests.
  budget() { # budget LIMIT: LIMIT, or what is left of 530 s if that is less
    local left=$((530 - SECONDS)); [ "$left" -lt "$1" ] && echo "$((left > 5 ? left : 5))" || echo "$1"
  }
  step fabric_bench "$(budget 150)" python3 benchmarks/fabric_bench.py --out "$OUT/fabric_bench.json"
  step pytest "$(budget 240)" python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider -rA
  step nccl_tests_build "$(budget 150)" python3 benchmarks/nccl_tests.py build \
    --src .ref/nccl-tests --into /tmp/nccl-tests
  step agent_bench "$(budget 150)" python3 benchmarks/agent_bench.py --skip burn,bandwidth,startup \
    --nccl-tests /tmp/nccl-tests/all_reduce_perf --out "$OUT/agent_bench.json"
elif [ "$MODE" = final10 ]; then
  # The in-node sweep (agent / lean reference / nccl-tests, same run), the fabric over sockets
  # with 20 iterations, and the fabric GPU tests with their failures written out in full.
  budget() { local left=$((560 - SECONDS)); [ "$left" -lt "$1" ] && echo "$((left > 5 ? left : 5))" || echo "$1"; }
  step nccl_tests_build "$(budget 90)" python3 benchmarks/nccl_tests.py build \
    --src .ref/nccl-tests --into /tmp/nccl-tests
  step agent_bench "$(budget 120)" python3 benchmarks/agent_bench.py --skip burn,bandwidth,startup \
    --nccl-tests /tmp/nccl-tests/all_reduce_perf --out "$OUT/agent_bench.json"
  step fabric_bench "$(budget 120)" python3 benchmarks/fabric_bench.py --iterations 20 \
    --out "$OUT/fabric_bench.json"
  step pytest_fabric "$(budget 300)" python3 -m pytest -m gpu tests/gpu/test_gpu_fabric.py -v \
    --tb=long -rA --timeout 150 -p no:cacheprovider
elif [ "$MODE" = probe10 ]; then
  # Wall time of the default run, the in-node all-reduce timed three ways at small sizes (graph,
  # graph with NCCL_GRAPH_MIXING_SUPPORT=0, eager), the fabric with 20 iterations, the GPU tests.
  budget() { local left=$((560 - SECONDS)); [ "$left" -lt "$1" ] && echo "$((left > 5 ? left : 5))" || echo "$1"; }
  began=$(now)
  step run_default "$(budget 120)" python3 -m gpuval_agent.cli run --json "$OUT/run_default.json"
  echo "run_default wall $(since "$began") s" >>"$OUT/summary.log"
  step refs "$(budget 120)" bash -c 'sizes=1048576,2097152,4194304,8388608,16777216,33554432,67108864
    for v in graph eager nomix; do
      mode=$v; extra=""; [ $v = nomix ] && mode=graph && export NCCL_GRAPH_MIXING_SUPPORT=0
      python3 benchmarks/ref_allreduce.py --gpus 2 --sizes $sizes --mode $mode --out /tmp/ref.json
      echo "== $v"; python3 -c "import json; [print(r[\"bytes\"], r[\"busbwGBps\"]) for r in json.load(open(\"/tmp/ref.json\"))]"
    done'
  step fabric_bench "$(budget 120)" python3 benchmarks/fabric_bench.py --iterations 20 \
    --out /tmp/fabric_bench.json
  step pytest_fabric "$(budget 150)" python3 -m pytest -m gpu tests/gpu/test_gpu_fabric.py -v \
    -p no:cacheprovider -rA
  step pytest "$(budget 300)" python3 -m pytest -m gpu tests/gpu -v -p no:cacheprovider -rA \
    --deselect tests/gpu/test_gpu_fabric.py
elif [ "$MODE" = memtest ]; then
  # The memory check (issue 19, part 2): its benchmark with the launch variants, its GPU tests and
  # `gpuval-agent run --checks memory` (RUN_LIMIT=0 leaves that out).
  step memtest_bench "${BENCH_LIMIT:-120}" python3 benchmarks/memtest_bench.py --variants \
    --out "$OUT/memtest_bench.json"
  step pytest_memory "${PYTEST_LIMIT:-150}" python3 -m pytest -m gpu tests/gpu/test_gpu_memory.py -v \
    -p no:cacheprovider -rA --timeout 140
  if [ "${RUN_LIMIT:-90}" != 0 ]; then
    began=$(now)
    step run_memory "${RUN_LIMIT:-90}" python3 -m gpuval_agent.cli run --checks memory \
      --json "$OUT/run_memory.json"
    echo "run_memory wall $(since "$began") s" >>"$OUT/summary.log"
  fi
elif [ "$MODE" = baseline ]; then
  # Issue 18: the default run against the shipped H200 baseline (its ratios in the table and the
  # JSON), then a run whose burn shares GPU 0 with a plain matmul load started 8 s in (inside the
  # burn, after the start-up checks): GPU 0 is GpuInUse naming the load (issue 17), not tested and
  # kept out of the baseline rules.
  began=$(now)
  step run_baseline 150 python3 -m gpuval_agent.cli run --json "$OUT/run_baseline.json"
  echo "run_baseline wall $(since "$began") s" >>"$OUT/summary.log"
  python3 benchmarks/gpu_load.py --gpu 0 --delay 8 --seconds 45 >"$OUT/gpu_load.log" 2>&1 &
  step run_shared 150 python3 -m gpuval_agent.cli run --duration 30 --json "$OUT/run_shared.json"
  wait
  # The burn slowed on purpose (GPUVAL_BURN_SLOWDOWN: ~0.8 of full throughput, nothing else on the
  # GPU): BelowBaseline names it.
  GPUVAL_BURN_SLOWDOWN=0.8 step run_slowed 150 python3 -m gpuval_agent.cli run --checks driver,burn \
    --duration 20 --json "$OUT/run_slowed.json"
elif [ "$MODE" = inuse ]; then
  # Issue 17 part 3 again, with the watch's poll (every 0.1 s while a check makes CUDA contexts,
  # the driver check's CUDA initialisation included): two agents started at once on one GPU (c,
  # three times: its outcome hangs on timing), the clean run with the poll (d) and without it (g),
  # and what one NVML reading of the GPUs' processes costs (f). Every file under $OUT/inuse.
  readlink /proc/self/ns/pid >>"$OUT/summary.log"
  step inuse "${INUSE_LIMIT:-420}" python3 benchmarks/inuse_scenarios.py --out "$OUT/inuse" \
    --duration 10 --only c,d,f,g --repeat 3
  cat "$OUT/inuse.log" >>"$OUT/summary.log"
elif [ "$MODE" = train ]; then
  # Issue 36 in one call (8 files under $OUT): each attention backend's determinism and speed
  # (two runs of the plain loop in one process, the large model), the fastest bit-identical one
  # pinned for the rest: the training benchmark (the check twice, its plain-loop reference with and
  # without the deterministic settings, the check with a weight nudged at step 10), the full
  # profile's wall time, the GPU tests. ATTENTION=... skips the probe.
  budget() { local left=$((${TRAIN_BUDGET:-575} - SECONDS)); [ "$left" -lt "$1" ] && echo "$((left > 5 ? left : 5))" || echo "$1"; }
  ATTENTION=${ATTENTION:-}
  if [ -z "$ATTENTION" ]; then
    step train_probe "$(budget 110)" python3 benchmarks/train_reference.py \
      --probe flash,efficient,cudnn,math --steps 4 --warmup 2 --json "$OUT/train_probe.json"
    ATTENTION=$(python3 -c 'import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r.get("identical")]
print(min(rows, key=lambda r: r["stepSeconds"])["attention"] if rows else "math")' \
      "$OUT/train_probe.json" 2>/dev/null || echo flash)
  fi
  echo "attention pinned: $ATTENTION" >>"$OUT/summary.log"
  step train_bench "$(budget 330)" python3 benchmarks/train_bench.py --attention "$ATTENTION" \
    --context --out "$OUT/train_bench.json"
  echo "{\"train\": {\"attention\": \"$ATTENTION\"}}" >/tmp/full.json
  began=$(now)
  step run_full "$(budget 150)" python3 -m gpuval_agent.cli run --profile full --config /tmp/full.json \
    --json "$OUT/run_full.json"
  echo "run_full wall $(since "$began") s" >>"$OUT/summary.log"
  step pytest_train "$(budget 160)" python3 -m pytest -m gpu tests/gpu/test_gpu_train.py -v \
    -p no:cacheprovider -rA --timeout 150
  grep -A14 "^check tokens/s" "$OUT/train_bench.log" >>"$OUT/summary.log"
  cat "$OUT/summary.log"
  exit 0
elif [ "$MODE" = final12 ]; then
  # The session's last call on one H200, MIG off (never changed): the default run's wall time and
  # figures (the environment record's MIG fields stay off), the verified bf16 burn beside plain
  # torch matmul, the full profile (training step included), and every GPU test.
  budget() { local left=$((${FINAL_BUDGET:-560} - SECONDS)); [ "$left" -lt "$1" ] && echo "$((left > 5 ? left : 5))" || echo "$1"; }
  began=$(now)
  step run_default "$(budget 110)" python3 -m gpuval_agent.cli run --json "$OUT/run_default.json"
  echo "run_default wall $(since "$began") s" >>"$OUT/summary.log"
  step bench "$(budget 70)" python3 benchmarks/agent_bench.py --seconds 8 --precisions bf16 \
    --skip bandwidth,nccl,startup --out "$OUT/bench.json"
  began=$(now)
  step run_full "$(budget 150)" python3 -m gpuval_agent.cli run --profile full --json "$OUT/run_full.json"
  echo "run_full wall $(since "$began") s" >>"$OUT/summary.log"
  step pytest "$(budget 330)" python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider -rA \
    --timeout 200
  grep -E "passed|failed|skipped" "$OUT/pytest.log" | tail -3 >>"$OUT/summary.log"
  cat "$OUT/summary.log"
  exit 0
elif [ "$MODE" = h100 ]; then
  # Issue 42 parts 6-7 on one H100 (device kind nvidia-h100-x1) in one call, at most 8 files under
  # $OUT: the default run, the verified burn at the other precisions, the full profile (its wall
  # time; its burn and copies are the baseline's second node; the training step's figures and
  # losses), a second training run (the losses again: bit-identical across processes?); then the
  # H100 baseline made here from them by shippedgen (as `make generate` does), a weight nudged
  # before the last step (65 of 5 + 60) against it, another stack (efficient attention) against
  # it, and the GPU tests of the baseline and the training step. Every log in logs.tar.gz; the
  # measurements also stay in /tmp/h100 for a next call on the same machine.
  budget() { local left=$((${H100_BUDGET:-575} - SECONDS)); [ "$left" -lt "$1" ] && echo "$((left > 5 ? left : 5))" || echo "$1"; }
  mkdir -p /tmp/h100
  nvidia-smi -q -d POWER >>"$OUT/summary.log" 2>&1
  began=$(now)
  step run_default "$(budget 100)" python3 -m gpuval_agent.cli run --json "$OUT/run_default.json"
  echo "run_default wall $(since "$began") s" >>"$OUT/summary.log"
  step bench "$(budget 140)" python3 benchmarks/agent_bench.py --seconds 8 \
    --precisions fp16,tf32,fp32,fp64 --skip bandwidth,nccl,startup --out "$OUT/bench.json"
  began=$(now)
  step run_full "$(budget 160)" python3 -m gpuval_agent.cli run --profile full --json "$OUT/run_full.json"
  echo "run_full wall $(since "$began") s" >>"$OUT/summary.log"
  step run_train "$(budget 80)" python3 -m gpuval_agent.cli run --checks train --json "$OUT/run_train.json"
  for f in run_default bench run_full run_train; do
    cp "$OUT/$f.json" "benchmarks/results/h100-${f//_/-}.json" && cp "$OUT/$f.json" /tmp/h100/
  done
  step shippedgen 30 python3 -c 'from gpuval_api.baseline import shippedgen as g
for name, text in g.render().items():
    (g.SHIPPED / name).write_text(text); print("wrote", name)
print(text)'
  GPUVAL_TRAIN_PERTURB=65 step run_nudged "$(budget 80)" python3 -m gpuval_agent.cli run \
    --checks train --json /tmp/h100/run_nudged.json
  echo '{"train": {"attention": "efficient"}}' >/tmp/efficient.json
  step run_efficient "$(budget 80)" python3 -m gpuval_agent.cli run --checks train \
    --config /tmp/efficient.json --json /tmp/h100/run_efficient.json
  step pytest "$(budget 200)" python3 -m pytest -m gpu tests/gpu/test_gpu_baseline.py \
    tests/gpu/test_gpu_train.py -v -p no:cacheprovider -rA --timeout 150
  python3 -c 'import json, sys
for name in sys.argv[1:]:
    try:
        d = json.load(open(name))
    except Exception as e:
        print(name, "unreadable", e); continue
    t = next((c for c in d["checks"] if c["name"] == "train"), None)
    print(name, d["verdict"], "train:", t and t["verdict"], t and (t.get("training") or {}).get("digest"),
          (d.get("baseline") or {}).get("name"), (d.get("baseline") or {}).get("training"))' \
    "$OUT"/run_default.json "$OUT"/run_full.json "$OUT"/run_train.json /tmp/h100/run_nudged.json \
    /tmp/h100/run_efficient.json >>"$OUT/summary.log" 2>&1
  grep -E "passed|failed|skipped" "$OUT/pytest.log" | tail -3 >>"$OUT/summary.log"
  tar -czf "$OUT/logs.tar.gz" -C "$OUT" $(cd "$OUT" && ls *.log) -C /tmp/h100 run_nudged.json \
    run_efficient.json -C "$PWD/api/src/gpuval_api/baseline" shipped
  cat "$OUT/summary.log"
  rm -f "$OUT"/*.log  # at most 8 files come back: the logs travel in logs.tar.gz
  exit 0
elif [ "$MODE" = h100check ]; then
  # Every GPU test on one H100, with the shipped H100 baseline in the tree.
  step pytest 560 python3 -m pytest -m gpu tests/gpu -v -p no:cacheprovider -rA --timeout 200
  grep -E "passed|failed|skipped" "$OUT/pytest.log" | tail -3 >>"$OUT/summary.log"
  cat "$OUT/summary.log"
  exit 0
elif [ "$MODE" = full12 ]; then
  # The full profile again with the training ranks started as the burn starts, and the training
  # step's GPU tests.
  began=$(now)
  step run_full 170 python3 -m gpuval_agent.cli run --profile full --json "$OUT/run_full.json"
  echo "run_full wall $(since "$began") s" >>"$OUT/summary.log"
  step pytest_train 170 python3 -m pytest -m gpu tests/gpu/test_gpu_train.py -q \
    -p no:cacheprovider -rA --timeout 150
  grep -E "passed|failed" "$OUT/pytest_train.log" | tail -2 >>"$OUT/summary.log"
  cat "$OUT/summary.log"
  exit 0
elif [ "$MODE" = smoke ]; then
  step pytest 300 python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider -rA
  step bench 240 python3 benchmarks/agent_bench.py --seconds 4 --out "$OUT/bench.json"
  step run 120 python3 -m gpuval_agent.cli run --duration 5 --transfer-size 512M --json "$OUT/run.json"
elif [ "$MODE" = check ]; then
  step pytest 150 python3 -m pytest -m gpu tests/gpu/test_gpu_agent.py -k "not never_joins" -q \
    -p no:cacheprovider -rA
  began=$(now)
  step run_default 150 python3 -m gpuval_agent.cli run --json "$OUT/run_default.json"
  echo "run_default wall $(since "$began") s" >>"$OUT/summary.log"
elif [ "$MODE" = issue9 ]; then
  step probe_wall 120 python3 benchmarks/wall_probe.py --out /tmp/wall.json
  began=$(now)
  step run_default 150 python3 -m gpuval_agent.cli run --json "$OUT/run_default.json"
  echo "run_default wall $(since "$began") s; ended $(now)" >>"$OUT/summary.log"
  step pytest 400 python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider -rA
elif [ "$MODE" = b7 ]; then
  # Where the default run's time goes outside its checks: the probe in a fresh process, the
  # default run twice (its driver check carries the environment record's split), the probe again.
  python3 -c 'import importlib.metadata as m; from gpuval_agent.backends.cuda import torch_versions_from_files as f
print("metadata", m.version("torch"), "files", f()); import torch; print("imported", torch.__version__, torch.version.cuda)' \
    >>"$OUT/summary.log" 2>&1
  step probe_before 120 python3 benchmarks/wall_probe.py
  for n in 1 2; do
    began=$(now)
    step run_default_$n 150 python3 -m gpuval_agent.cli run --json "$OUT/run_default_$n.json"
    echo "run_default_$n wall $(since "$began") s; began $began, ended $(now)," \
      "JSON written $(python3 -c "import os; print(os.stat('$OUT/run_default_$n.json').st_mtime)")" \
      >>"$OUT/summary.log"
  done
  step probe_after 120 python3 benchmarks/wall_probe.py
elif [ "$MODE" = final ]; then
  step pytest 240 python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider -rA
  (sleep 30; curl -s localhost:9400/metrics >"$OUT/metrics.txt" 2>&1) &
  began=$(now)
  step run_default 150 python3 -m gpuval_agent.cli run --metrics-port 9400 --json "$OUT/run_default.json"
  echo "run_default wall $(since "$began") s" >>"$OUT/summary.log"
  wait
  began=$(now)
  step run_three 150 python3 -m gpuval_agent.cli run --duration 20 --precisions bf16,tf32,fp64 \
    --json "$OUT/run_three.json"
  echo "run_three wall $(since "$began") s" >>"$OUT/summary.log"
  # At most 8 files come back: the probe's rows are in its log.
  step probe 120 python3 benchmarks/size_probe.py --out /tmp/probe.json
else
  step pytest 240 python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider -rA
  step bench 300 python3 benchmarks/agent_bench.py --seconds "${BENCH_SECONDS:-10}" --out "$OUT/bench.json"
  (sleep 20; curl -s localhost:9400/metrics >"$OUT/metrics.txt" 2>&1) &
  step run 300 python3 -m gpuval_agent.cli run --duration "${RUN_SECONDS:-30}" \
    --precisions bf16,tf32,fp64 --metrics-port 9400 --json "$OUT/run.json"
  wait
fi
tail -n 40 "$OUT"/*.log
