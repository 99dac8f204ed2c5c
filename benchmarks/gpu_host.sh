#!/usr/bin/env bash
# Every check that needs a GPU, in one run of about 7 minutes on a one-GPU host:
#   1. the host: nvidia-smi, torch, CUDA and NCCL versions;
#   2. the trainer's CUDA tests (deferred step events, data on the device, exact resume, its
#      flight-recorder dump on nccl);
#   3. benchmarks/trainer_overhead.py --device cuda, bf16, on the two models of the H200 trial
#      (MLP 8192×4 batch 4096, and 2048×4 batch 1024; target ≥ 0.97 each);
#   4. ddptui end to end on the GPU: check (NVML), launch, stop, resume, status, events, and the
#      console's health screen and GPU pane (benchmarks/gpu_ddptui.py);
#   5. a flight-recorder dump of an NCCL process group (tests/fixtures/flight/record.py), a
#      recording for ddptui.run.evidence.flight's tests;
#   6. the agent's GPU sample through the driver's NVML against nvidia-smi, per heartbeat
#      (benchmarks/gpu_sample.py --real), and the host's NVML answers recorded in the shape of
#      tests/fixtures/nvml (OUT_DIR/nvml.json).
# A failing step does not stop the next; each prints its exit status and seconds.
#
# The host's Python needs torch (CUDA build) and ddptui's dependencies. On a machine without a
# package index, download them here first (wheels for its Python, say 3.12):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
#       asyncssh cryptography cffi pycparser tomli-w textual textual-plot textual-hires-canvas \
#       platformdirs mdit-py-plugins linkify-it-py uc-micro-py
# and this script installs whatever lies in .whl into /tmp/site first. Then, there:
#   benchmarks/gpu_host.sh OUT_DIR
set -u
cd "$(dirname "$0")/.."
out=${1:?usage: benchmarks/gpu_host.sh OUT_DIR}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
if compgen -G ".whl/*.whl" >/dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

step() {
    local name=$1 limit=$2 started=$SECONDS
    shift 2
    echo "=== $name"
    timeout --kill-after 10 "$limit" "$@"
    echo "=== $name: exit $? in $((SECONDS - started)) s"
}

{
    step host 60 sh -c "nvidia-smi; $py -c 'import sys, torch; print(sys.version); \
print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.device_count())'"
    step trainer-tests 240 "$py" -m pytest -p no:cacheprovider -q -o addopts= \
        tests/trainer/test_cuda.py "tests/trainer/test_units.py::test_device_scalars_arrive_without_a_sync" \
        "tests/trainer/test_units.py::test_a_failed_rank_s_flight_recorder_dump_reads_as_its_last_collectives"
    step overhead-8192 200 "$py" benchmarks/trainer_overhead.py --device cuda --precision bf16 \
        --width 8192 --depth 4 --batch-size 4096 --rounds 8
    step overhead-2048 150 "$py" benchmarks/trainer_overhead.py --device cuda --precision bf16 \
        --width 2048 --depth 4 --batch-size 1024 --rounds 16
    step ddptui 300 "$py" benchmarks/gpu_ddptui.py "$out"
    step flight-recorder 90 "$py" -m tests.fixtures.flight.record nccl-one-gpu --to "$out/flight"
    step gpu-sample 90 "$py" benchmarks/gpu_sample.py --real --samples 200 --record "$out/nvml.json"
} 2>&1 | tee "$out/summary.txt"
