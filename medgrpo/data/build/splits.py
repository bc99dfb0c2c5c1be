"""Leakage-free splits: whole groups (a patient, a lesion, else one image) go to one split.

ChestX-ray14 holds up to hundreds of images per patient and HAM10000 several images per lesion; splitting by
image would put the same patient in train and test and inflate test accuracy. Groups are shuffled with the
seed and each is given to the split furthest below its target share of images, so shares come out close to
the fractions even when groups differ in size.
"""

from __future__ import annotations

import random
from collections import defaultdict

from medgrpo.data.build.readers import BuildError, SourceItem


def split_items(items: list[SourceItem], fractions: dict[str, float], seed: int = 0) -> dict[str, list[SourceItem]]:
    """Assign every item to a split, keeping each ``item.group`` whole; deterministic for a seed.

    Args:
        items: the source items.
        fractions: split name -> target share of images (positive, summing to 1).
        seed: shuffles the order in which groups are placed.
    """
    if not fractions or any(f <= 0 for f in fractions.values()) or abs(sum(fractions.values()) - 1) > 1e-6:
        raise BuildError(f"config field 'splits': fractions must be positive and sum to 1, got {fractions}")
    groups: dict[str, list[SourceItem]] = defaultdict(list)
    for item in items:
        groups[item.group].append(item)
    order = sorted(groups)
    random.Random(seed).shuffle(order)
    out: dict[str, list[SourceItem]] = {name: [] for name in fractions}
    placed = 0
    for key in order:
        members = groups[key]
        placed += len(members)
        # the split with the largest shortfall against its target after this group is placed
        name = max(fractions, key=lambda s: fractions[s] * placed - len(out[s]))
        out[name].extend(members)
    return out


def leaks(splits: dict[str, list[SourceItem]]) -> list[str]:
    """Every group or image file found in more than one split (empty = leakage-free)."""
    seen: dict[tuple[str, str], str] = {}
    found = []
    for name, items in splits.items():
        for item in items:
            for key in (("group", item.group), ("image", str(item.image.resolve()))):
                first = seen.setdefault(key, name)
                if first != name:
                    found.append(f"{key[0]} '{key[1]}' in both {first} and {name}")
    return sorted(set(found))
