#!/usr/bin/env bash
# The positional-scheme study of docs/training.md: the essay's model with alibi, rope,
# learned and nope, the same token budget each, trained on TinyStories train.txt,
# evaluated on valid.txt at 1x, 2x, 4x and 8x the training context.
#   bash scripts/study_positional.sh [STEPS] [OUT]
#   LOGGER=tensorboard bash scripts/study_positional.sh   # every run also in one tracker, side by side
#                                                        # (tensorboard, mlflow, wandb or csv; see docs/training.md)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-400}
OUT=${2:-runs/study}
DATA=${ALILAMA_DATA:-../shared/data}
A=.venv/bin/alilama
mkdir -p "$OUT"
TRACK=()
if [ -n "${LOGGER:-}" ]; then  # the overrides that put every run of the study into one tracker
  read -r -a TRACK <<< "$(.venv/bin/python -c 'import sys; from alilama_loggers import shared_tracker
print(" ".join(shared_tracker(*sys.argv[1:])))' "$LOGGER" "$OUT" study-positional)"
fi
[ -d "$OUT/tok" ] || $A tokenizer train --input "$DATA/tinystories/train.txt" --vocab-size 4096 \
    --special '<|endoftext|>' --out "$OUT/tok"
[ -d "$OUT/data" ] || $A data prepare --input "$DATA/tinystories/train.txt" --tokenizer "$OUT/tok" \
    --out "$OUT/data" --val-fraction 0.02
for scheme in alibi rope learned nope; do
  $A train --config configs/essay.yaml --data "$OUT/data" --out "$OUT/$scheme" --overwrite --no-progress \
      model.positional=$scheme model.attention=auto train.max_steps=$STEPS train.warmup_steps=40 \
      train.eval_every=$STEPS train.checkpoint_every=$STEPS train.sample_prompts=[] ${TRACK[@]+"${TRACK[@]}"} \
      > "$OUT/$scheme.log"
  $A eval "$OUT/$scheme" --data "$DATA/tinystories/valid.txt" --context-lengths 128,256,512,1024 \
      --max-tokens 131072 --json ${LOGGER:+--log} > "$OUT/$scheme.eval.json"
  tail -1 "$OUT/$scheme.log"
done
