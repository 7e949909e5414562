#!/usr/bin/env bash
# One prepared run on a lent GPU machine (see DEVELOPERS.md): the machine has torch but no FBGEMM
# and no pydantic, so pydantic travels as wheels in .whl/ and the profiler uses torch-tbe (FBGEMM's
# TBE algorithm in torch, equal to FBGEMM in results; the older `torch` backend's autograd backward
# could not be fitted). A unit sweep first (fails fast), then the full sweep into $OUT/h200-full,
# cut off before the call's limit (the dataset is resumable: rerun with it carried to finish),
# then `shardopt train` on it, whose held-out error decides whether it ships (issue 22: <= 20%).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))" | tee -a "$OUT/nvidia-smi.txt"
python3 -m shardopt profile --device cuda --preset unit --backend torch-tbe -o /tmp/unit 2>&1 | tail -3 || exit 1
mkdir -p "$OUT/h200-full"
[ -d carried/h200-full ] && cp carried/h200-full/* "$OUT/h200-full/"
timeout "${FULL_LIMIT_S:-420}" python3 -m shardopt profile --device cuda --preset full --backend torch-tbe \
  -o "$OUT/h200-full" 2>&1 | tr '\r' '\n' | tee "$OUT/profile.log" | tail -4
echo "points: $(wc -l < "$OUT/h200-full/points.jsonl")"
python3 -m shardopt train "$OUT/h200-full" --hardware h200 -o "$OUT/h200.json" 2>&1 | tail -2
