#!/usr/bin/env bash
# One-GPU smoke run (see eval/gpu_smoke.py): bash eval/gpu_smoke.sh [--runs ...] [--out results.json]
cd "$(dirname "$0")/.." && HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false exec "${PYTHON:-.venv/bin/python}" eval/gpu_smoke.py "$@"
