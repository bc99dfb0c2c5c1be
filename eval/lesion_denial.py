"""How often the reasoning denies a finding the image has, and claims one it lacks, read by the verifiers' own
reader: per evaluation, the share of abnormal records whose reasoning states the image is normal ("No lesion",
"no abnormality": polarity normal alone) and of normal records whose reasoning states a finding.

    HF_HUB_OFFLINE=1 .venv/bin/python eval/lesion_denial.py DATASET EVAL_DIR [EVAL_DIR ...]

DATASET is the folder the evaluation ran on (e.g. runs/demo/data); each EVAL_DIR holds a predictions.jsonl.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from medgrpo.data import load_records
from medgrpo.eval.predictions import PREDICTIONS, read_predictions
from medgrpo.rewards.claims import reading_of
from medgrpo.rewards.parsing import parse_completion


def polarity(completion: str) -> frozenset[str]:
    """The polarities (normal / abnormal) the completion's reasoning states."""
    think = parse_completion(completion).think
    return reading_of(think).polarity if think is not None else frozenset()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("eval_dirs", type=Path, nargs="+")
    args = parser.parse_args()
    abnormal: dict[str, bool] = {}
    for split in ("train", "test"):
        if (args.dataset / f"{split}.jsonl").is_file():
            for r in load_records(args.dataset, split=split, check_images=False):
                if isinstance((r.evidence or {}).get("abnormal"), bool):
                    abnormal[r.id] = r.evidence["abnormal"]
    print(f"{'evaluation':<40} {'abnormal: says normal':>24} {'normal: claims a finding':>26}")
    for eval_dir in args.eval_dirs:
        denied = claimed = n_abnormal = n_normal = 0
        for row in read_predictions(eval_dir / PREDICTIONS):
            if row["id"] not in abnormal:
                continue
            said = polarity(row["completion"])
            if abnormal[row["id"]]:
                n_abnormal += 1
                denied += said == {"normal"}
            else:
                n_normal += 1
                claimed += said == {"abnormal"}
        print(f"{str(eval_dir):<40} {denied:>6}/{n_abnormal:<6} ({denied / max(n_abnormal, 1):5.1%})"
              f" {claimed:>8}/{n_normal:<6} ({claimed / max(n_normal, 1):5.1%})")


if __name__ == "__main__":
    main()
