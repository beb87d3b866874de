#!/usr/bin/env bash
# minitransformer on one GPU, round 6 (issue 49): the GPU tests both ways, the capture/replay
# test, the launch count, the bench against PyTorch (eager and CUDA graph) with cached vs
# recomputing greedy decoding, train with CUDA graphs (the default) vs --no-cuda-graph and the
# graphs' pool from the result card, the pool of a base-size shape. .ci/gpu/README.md says
# what to expect and what a miss means.
#
# From the repository root, with the two wheels array_api_compat-1.16.0 and
# array_api_strict-2.6.1 in .whl/ (or ../.whl/):
#     OUT=/path/to/results bash .ci/gpu/round6.sh        # ~7 min; every step under `timeout`
# Needs: one NVIDIA GPU, CuPy 14 (CUDA 13), NumPy 2.x, PyTorch 2.11 (for the bench), pytest
# (pytest-xdist and pytest-timeout are used where installed). No network.
# Knobs (environment): RUN6_DEADLINE (s for all steps, default 420), RUN6_SITE (/tmp/site),
# RUN6_TESTS (the pytest path, default tests), RUN6_BENCH_SECONDS (4), RUN6_TRAIN_STEPS (the
# train runs' steps: 300/400/300 unless set), RUN6_FAKE_GPU=1 (a dry run on the CPU: every
# python3 runs the project's CuPy paths on tests/cupy_standin, the counting NumPy stand-in).
set -u -o pipefail
S=$SECONDS
OUT=${OUT:-/tmp/round6-out}
mkdir -p "$OUT"
DEADLINE=${RUN6_DEADLINE:-420}
SITE=${RUN6_SITE:-/tmp/site}
TESTS=${RUN6_TESTS:-tests}
BENCH_S=${RUN6_BENCH_SECONDS:-4}
TRAIN_STEPS=${RUN6_TRAIN_STEPS:-}
RUNS=/tmp/round6-runs
L=$OUT/run.log
: >"$L"

say() { printf '[%3ds] %s\n' $((SECONDS - S)) "$*" | tee -a "$L"; }
# grant CAP MIN RESERVE: a step's timeout: CAP, or less where the deadline (minus RESERVE s
# kept for the steps after it) leaves less; 0 (skip) below MIN
grant() {
    local t=$((DEADLINE - (SECONDS - S) - ${3:-0}))
    [ "$t" -gt "$1" ] && t=$1
    [ "$t" -lt "$2" ] && t=0
    echo "$t"
}

if [ ! -d minitransformer ] && [ -d .proj/minitransformer ]; then cd .proj; fi
if [ ! -d minitransformer ] && [ -d "$(dirname "$0")/../../minitransformer" ]; then cd "$(dirname "$0")/../.."; fi
if [ ! -d minitransformer ] || [ ! -f pyproject.toml ]; then
    say "run me from the repository root (minitransformer/ and pyproject.toml there)"; exit 2
fi
WHL=.whl
[ -d "$WHL" ] || WHL=../.whl
PIP=$(python3 -m pip install -q --no-index --no-deps --upgrade --target "$SITE" "$WHL"/*.whl 2>&1) \
    || say "WARNING: pip install of $WHL/*.whl failed: $(echo "$PIP" | grep -v WARNING | tail -n2)"
export PYTHONPATH="$SITE:$PWD" MPLBACKEND=Agg PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p "$RUNS" "$OUT/train" "$SITE"
if [ "${RUN6_FAKE_GPU:-0}" = 1 ]; then  # a dry run: CuPy is the stand-in in every python3
    export RUN6_FAKE_GPU RUN6_REPO="$PWD"
    cat >"$SITE/sitecustomize.py" <<'EOF_SITE'
import os
import sys

if os.environ.get("RUN6_FAKE_GPU") == "1":  # written by .ci/gpu/round6.sh for a dry run
    try:
        sys.path.insert(0, os.path.join(os.environ["RUN6_REPO"], "tests"))
        import cupy_standin
        import pytest

        cupy_standin.install(pytest.MonkeyPatch())
    except Exception as e:  # noqa: BLE001
        print("sitecustomize: stand-in not installed:", e, file=sys.stderr)
EOF_SITE
    say "RUN6_FAKE_GPU=1: a dry run on the CPU through tests/cupy_standin (no GPU figure is real)"
fi

# ---------------------------------------------------------------- 0. the machine
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    echo "cores $(nproc)"
    git log -1 --format='commit %h %ad %s' --date=short 2>/dev/null | cut -c1-110
    python3 - <<'EOF'
import importlib, platform
print("python", platform.python_version())
for m in ("numpy", "cupy", "torch", "array_api_compat", "array_api_strict", "pytest", "xdist",
          "pytest_timeout"):
    try:
        print(m, getattr(importlib.import_module(m), "__version__", "present"))
    except Exception as e:  # noqa: BLE001
        print(m, "MISSING", type(e).__name__, e)
try:
    import cupy
    rt = cupy.cuda.runtime
    print("CUDA runtime", rt.runtimeGetVersion(), "driver", rt.driverGetVersion(),
          "GPUs", rt.getDeviceCount())
except Exception as e:  # noqa: BLE001
    print("CuPy/GPU not usable:", type(e).__name__, e)
EOF
} >>"$L" 2>&1
say "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1); $(grep -E '^(cupy|torch|numpy) ' "$L" | tr '\n' ' ')"

# ---------------------------------------------------------------- 1. GPU tests, both ways
# k0 and k1 run side by side (7 xdist workers each on a 16-core machine); nothing is timed
# while they run. The capture/replay test (step 2) skips itself in k0 (no graphs there).
X=""
python3 -c 'import xdist' 2>/dev/null && X="-n 7 --dist loadfile"
python3 -c 'import pytest_timeout' 2>/dev/null && X="$X --timeout=120 --timeout-method=thread"
t=$(grant 170 60 250)
if [ "$t" -gt 0 ]; then
    say "1. pytest -m gpu, MT_CUDA_KERNELS=0 and =1 side by side (timeout ${t}s; $X)"
    for k in 0 1; do
        MT_CUDA_KERNELS=$k timeout -s INT -k 20 "$t" python3 -m pytest "$TESTS" -m gpu \
            -p no:cacheprovider -v -rfE --tb=short --maxfail=60 $X >"$OUT/tests-k$k.log" 2>&1 &
        eval "p$k=\$!"
    done
    wait "$p0"; r0=$?
    wait "$p1"; r1=$?
    say "   k0 (rc $r0): $(tail -n1 "$OUT/tests-k0.log")"
    say "   k1 (rc $r1): $(tail -n1 "$OUT/tests-k1.log")"
else
    say "1. GPU tests skipped: no time left"
fi

# ---------------------------------------------------------------- 2. capture and replay
# tests/fast/test_cuda_graph_replay.py on cuda, kernels on: its outcome read from step 1's
# k1 log; run alone (its own log) only when that log does not have it
REPLAY=tests/fast/test_cuda_graph_replay.py
# (pytest -v writes "FILE::TEST[cuda-copy] PASSED", with xdist "[gw0] [ 50%] PASSED FILE::TEST[cuda-copy]")
grep -E "test_cuda_graph_replay\.py::[^ ]*\[cuda-[a-z]+\]" "$OUT/tests-k1.log" 2>/dev/null \
    | grep -E "PASSED|FAILED|ERROR" >"$OUT/replay.log"
if [ -s "$OUT/replay.log" ]; then
    say "2. capture/replay (from tests-k1.log): $(grep -oE 'PASSED|FAILED|ERROR|\[cuda-[a-z]+\]' "$OUT/replay.log" | tr '\n' ' ')"
else
    t=$(grant 90 30 230)
    if [ "$t" -gt 0 ]; then
        MT_CUDA_KERNELS=1 timeout -s INT -k 10 "$t" python3 -m pytest "$REPLAY" -m gpu \
            -p no:cacheprovider -v -rfEs --tb=short >"$OUT/replay.log" 2>&1
        say "2. capture/replay alone (rc $?): $(tail -n1 "$OUT/replay.log")"
    else
        say "2. capture/replay skipped: no time left"
    fi
fi

# ---------------------------------------------------------------- 3. launches, kernels on
callcount() {
    local k=$1 t
    t=$(grant 60 15 "$2")
    if [ "$t" -eq 0 ]; then say "3. callcount k$k skipped: no time left"; return; fi
    MT_CUDA_KERNELS=$k timeout -k 5 "$t" python3 -m minitransformer.tools.callcount \
        --device cuda:0 >"$OUT/callcount-k$k.txt" 2>&1
    say "3. callcount MT_CUDA_KERNELS=$k (rc $?): $(head -n1 "$OUT/callcount-k$k.txt" | cut -c1-330)"
}
callcount 1 200

# ---------------------------------------------------------------- 4. bench vs PyTorch, decoding
# after the small preset, greedy decoding at small, 64 tokens: cached vs recomputing
t=$(grant 170 60 110)
if [ "$t" -gt 0 ]; then
    say "4. bench tiny/small/base --compare torch-graph, --seconds $BENCH_S (timeout ${t}s)"
    MT_CUDA_KERNELS=1 timeout -k 10 "$t" python3 -m minitransformer.tools.bench --device cuda \
        --compare torch-graph --gpu-only --preset tiny --preset small --preset base \
        --seconds "$BENCH_S" --json "$OUT/bench.json" >"$OUT/bench.log" 2>&1
    say "   bench rc $?: $(grep -E '^bench: |cache speed-up' "$OUT/bench.log" | tr '\n' ' ' | cut -c1-200)"
else
    say "4. bench skipped: no time left"
fi

# ---------------------------------------------------------------- 5. train, graph vs eager
train() {  # NAME TASK STEPS GRAPH(0/1) RESERVE
    local name=$1 task=$2 steps=${TRAIN_STEPS:-$3} graph=$4 t extra=""
    t=$(grant 45 15 "$5")
    if [ "$t" -eq 0 ]; then say "5. train $name skipped: no time left"; return; fi
    [ "$graph" = 0 ] && extra="--no-cuda-graph"  # graphs are the default on a GPU
    rm -rf "${RUNS:?}/$name"
    MT_CUDA_KERNELS=1 timeout -k 5 "$t" python3 -m minitransformer train "$task" --device cuda \
        --steps "$steps" --log-every 50 --eval-every 1000000 --checkpoint-every 1000000 \
        --eval-samples 2 --final-eval-samples 16 --no-progress --no-plots --json \
        --out "$RUNS/$name" $extra >"$OUT/train/$name.log" 2>&1
    local rc=$?
    cp "$RUNS/$name/metrics.jsonl" "$OUT/train/$name.metrics.jsonl" 2>/dev/null
    cp "$RUNS/$name/result.json" "$OUT/train/$name.result.json" 2>/dev/null
    local graphs
    graphs=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("cuda_graphs"))' \
        "$RUNS/$name/result.json" 2>/dev/null)
    say "5. train $name (rc $rc): $(grep -E '^\{' "$OUT/train/$name.log" | cut -c1-150); cuda_graphs $graphs"
}
train copy-eager copy 300 0 140
train copy-graph copy 300 1 120
train en-es-eager translate-en-es 400 0 100
train en-es-graph translate-en-es 400 1 80
train lm-graph lm 300 1 60

# ---------------------------------------------------------------- 6. pool of a base shape
cat >/tmp/round6_pool.py <<'EOF_POOL'
"""What the graphs' one shared pool holds for one captured base-size shape (copy, batch 64),
and where an eager tiny step's host time goes (cProfile)."""
import cProfile
import pstats
import sys
import tempfile
import time

import cupy as cp

from minitransformer.train import TrainConfig, Trainer


def trainer(tmp, graph, preset="tiny", batch=16, max_len=20, steps=30):
    cfg = TrainConfig(task="copy", device="cuda", out=tmp, progress=False, plots=False,
                      dropout=0.1, steps=steps, batch_size=batch, preset=preset,
                      cuda_graph=graph,
                      task_knobs=dict(max_len=max_len, n_train=2048, n_valid=8, n_test=8))
    t = Trainer(cfg)
    return t, (t.capture_steps() if graph else None)


with tempfile.TemporaryDirectory() as c:
    base, steps = trainer(c, True, preset="base", batch=64, max_len=30, steps=8)
    before = cp.get_default_memory_pool().total_bytes()
    t0 = time.perf_counter()
    for _ in range(6):
        base.train_step(next(base.stream))
    base.read_back()
    s = steps.stats() if hasattr(steps, "stats") else {}
    print(f"POOL base copy batch 64: pool {s.get('pool_bytes', 0) / 2**20:.1f} MiB for "
          f"{s.get('graphs')} shape(s), failed {steps.failed or 'none'}; default pool "
          f"{cp.get_default_memory_pool().total_bytes() // 2**20} MiB (was {before // 2**20}); "
          f"6 steps {time.perf_counter() - t0:.1f} s; stats {s}")

with tempfile.TemporaryDirectory() as d:  # host time of eager tiny steps, by function
    t, _ = trainer(d, False, batch=64, max_len=12, steps=40)
    bs = [next(t.stream) for _ in range(25)]
    for x in bs[:5]:
        t.train_step(x)
    t.read_back()
    t0 = time.perf_counter()
    for x in bs[5:15]:
        t.train_step(x)
    t.read_back()
    wall = (time.perf_counter() - t0) / 10
    prof = cProfile.Profile()
    prof.enable()
    for x in bs[15:25]:
        t.train_step(x)
    t.read_back()
    prof.disable()
    st = pstats.Stats(prof)
    groups = {}
    for (file, _, fn), (_, nc, tt, _, _) in st.stats.items():
        where = ("minitransformer/" + file.split("/minitransformer/")[1].split("/")[0]
                 if "/minitransformer/" in file else "cupy" if "cupy" in file or "cupy" in fn
                 else "ctypes" if "ctypes" in file or "_ctypes" in fn else "other")
        n, s = groups.get(where, (0, 0.0))
        groups[where] = (n + nc, s + tt)
    print(f"PROFILE eager tiny step (copy, batch 64, kernels on): {wall * 1e3:.2f} ms a step "
          "unprofiled; profiled self time per step by where the code lives:")
    for where, (n, s) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"  {where:28s} {n / 10:8.0f} calls {s / 10 * 1e3:7.2f} ms")
    st.sort_stats("tottime").print_stats(22)
sys.stdout.flush()
EOF_POOL
t=$(grant 60 20 40)
if [ "$t" -gt 0 ]; then
    MT_CUDA_KERNELS=1 timeout -k 5 "$t" python3 /tmp/round6_pool.py >"$OUT/pool.txt" 2>&1
    say "6. pool and profile (rc $?): $(grep -E '^(POOL|PROFILE)' "$OUT/pool.txt" | cut -c1-260 | tr '\n' ' ')"
else
    say "6. pool and profile skipped: no time left"
fi

# ---------------------------------------------------------------- 7. what is left, if time
callcount 0 25
train lm-eager lm 300 0 0

# ---------------------------------------------------------------- summary
(cd "$OUT" && tar czf train.tgz train && rm -rf train)
python3 - "$OUT" >"$OUT/summary.md" 2>&1 <<'EOF'
import json, os, re, statistics, sys, tarfile
out = sys.argv[1]
say = print
say("# round 6 GPU run: summary\n")
with open(os.path.join(out, "run.log")) as f:
    say("machine: " + " | ".join(l.strip() for l in f.read().splitlines()[:14]
                                 if l and not l.startswith("[") and "WARNING" not in l))
for k in (0, 1):
    p = os.path.join(out, f"tests-k{k}.log")
    if os.path.exists(p):
        lines = open(p, errors="replace").read().splitlines()
        tail = [l for l in lines if re.search(r"\d+ (passed|failed|error)", l)]
        fails = [l for l in lines if l.startswith(("FAILED", "ERROR"))][:12]
        say(f"\ntests MT_CUDA_KERNELS={k}: {tail[-1] if tail else (lines[-1] if lines else 'no output')}")
        for l in fails:
            say("  " + l[:200])
for k in (1, 0):
    p = os.path.join(out, f"callcount-k{k}.txt")
    if os.path.exists(p):
        js = [json.loads(l) for l in open(p) if l.startswith("{")]
        if js:
            j = js[-1]
            was = ("target <= 400; last H200 run: 392 + 3" if k else
                   "first H200 run: 1,188 + 100; expect more since the reference Linear broadcasts")
            say(f"\ncallcount k{k}: {j.get('kernel_launches')} kernels + {j.get('copies')} copies "
                f"({was}), {j.get('cupy_calls')} CuPy calls seen, call_us {j.get('call_us')}")
        else:
            say(f"\ncallcount k{k}: no JSON line; " + open(p).read()[-300:])
p = os.path.join(out, "bench.json")
if os.path.exists(p):
    r = json.load(open(p))
    say("\n| preset | ours eager ms | ours graph ms | torch eager ms | torch graph ms | "
        "eager/torch (range) | eager/torch graph | graph/torch | graph/torch graph |")
    say("|---|---|---|---|---|---|---|---|---|")
    for name, x in r["presets"].items():
        ms = lambda i: f"{x[i]['ms_median']:.2f}" if i in x else "-"
        rt = lambda k: (f"{x[k]:.2f}" + (f" ({x[k + '_range'][0]:.2f}-{x[k + '_range'][1]:.2f})"
                        if k + "_range" in x else "")) if k in x else "-"
        say(f"| {name} | {ms('ours')} | {ms('ours_graph')} | {ms('torch')} | {ms('torch_graph')} | "
            f"{rt('ratio_ours_over_torch')} | {rt('ratio_ours_over_torch_graph')} | "
            f"{rt('ratio_ours_graph_over_torch')} | {rt('ratio_ours_graph_over_torch_graph')} |")
    d = r.get("decode")
    if d:
        say(f"\ngreedy decoding at {d.get('preset')}, {d.get('length')} tokens, batch "
            f"{d.get('batch')}: cached {d.get('cached_tokens_per_s')} tok/s, recomputing "
            f"{d.get('recompute_tokens_per_s')} tok/s: cache speed-up {d.get('speedup')} "
            "(target >= 3)")
    if r.get("warnings"):
        say(f"bench warnings: {r['warnings']}")
else:
    say("\nbench: no bench.json (see bench.log)")
runs = {}
tgz = os.path.join(out, "train.tgz")
if os.path.exists(tgz):
    with tarfile.open(tgz) as t:
        for m in t.getmembers():
            f = t.extractfile(m) if m.isfile() else None
            if f is None:
                continue
            name = os.path.basename(m.name)
            if name.endswith(".metrics.jsonl"):
                recs = [json.loads(l) for l in f.read().decode().splitlines() if l.strip()]
                runs.setdefault(name[:-14], {})["train"] = [x for x in recs if x.get("split") == "train"]
            elif name.endswith(".result.json"):
                runs.setdefault(name[:-12], {})["card"] = json.loads(f.read())
say("\n| run | steps | tokens/s (card) | tokens/s (median window after the first) | final train loss | held-out loss | mode | graphs | replays | fallbacks | pool MiB |")
say("|---|---|---|---|---|---|---|---|---|---|---|")
for name in sorted(runs):
    c, tr = runs[name].get("card", {}), runs[name].get("train", [])
    w = [x["tokens_per_s"] for x in tr if isinstance(x.get("tokens_per_s"), float)]
    med = statistics.median(w[1:] or w) if w else None
    g = c.get("cuda_graphs") or {}
    say(f"| {name} | {c.get('steps')} | {c.get('tokens_per_s')} | {med and round(med)} | "
        f"{c.get('final_train_loss')} | {(c.get('metrics') or {}).get('loss')} | "
        f"{g.get('mode')}{' (' + str(g.get('why')) + ')' if g.get('why') else ''} | "
        f"{g.get('graphs')} | {g.get('replays')} | {g.get('fallbacks')} | {g.get('pool_mib')} |")
for task in ("copy", "en-es", "lm"):
    e, g = runs.get(f"{task}-eager", {}).get("train"), runs.get(f"{task}-graph", {}).get("train")
    if e and g:
        pairs = [(x["loss"], y["loss"]) for x, y in zip(e, g)]
        rel = max(abs(x - y) / abs(x) for x, y in pairs)
        say(f"{task}: --no-cuda-graph vs graphs, log-line losses: bit for bit {all(x == y for x, y in pairs)}, "
            f"max rel diff {rel:.2e} over {len(pairs)} lines")
p = os.path.join(out, "replay.log")
if os.path.exists(p):
    lines = open(p, errors="replace").read().splitlines()
    got = [" ".join(re.findall(r"\[cuda-[a-z]+\]|PASSED|FAILED|ERROR|SKIPPED", l))
           for l in lines if "test_cuda_graph_replay.py::" in l and "[cuda-" in l]
    say("\ncapture/replay test on cuda (losses, metrics, weights bit for bit after two shapes, "
        "an evaluation, a save and a resume): " + ("; ".join(got) or (lines[-1] if lines else "no output")))
p = os.path.join(out, "pool.txt")
if os.path.exists(p):
    say("\n" + "\n".join(l[:400] for l in open(p).read().splitlines() if l.startswith(("POOL", "PROFILE", "  minitransformer", "  cupy", "  ctypes", "  other"))))
EOF
say "summary written; total $((SECONDS - S)) s"
cat "$OUT/summary.md"
