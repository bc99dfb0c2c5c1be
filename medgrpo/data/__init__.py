"""Data layer: records, images, box conventions, adapters, synthetic benchmark and dataset builders."""

from medgrpo.data.record import (
    TASKS,
    LoadReport,
    MedADRecord,
    RecordError,
    load_records,
    record_from_dict,
    validate_dataset,
    write_records,
)

# Heavier names (they import `datasets`/pydicom) load on first use, so `medgrpo data validate` stays light.
_LAZY = {
    "BuildReport": "medgrpo.data.builders",
    "to_grpo_dataset": "medgrpo.data.builders",
    "to_sft_dataset": "medgrpo.data.builders",
    "ImageSettings": "medgrpo.data.preprocess",
    "prepare_images": "medgrpo.data.preprocess",
    "ImageError": "medgrpo.data.images",
    "load_image": "medgrpo.data.images",
    "CT_PRESETS": "medgrpo.data.dicom",
    "DicomError": "medgrpo.data.dicom",
    "convert": "medgrpo.data.adapters",
    "ADAPTERS": "medgrpo.data.adapters",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'medgrpo.data' has no attribute '{name}'")


__all__ = [
    "TASKS",
    "LoadReport",
    "MedADRecord",
    "RecordError",
    "load_records",
    "record_from_dict",
    "validate_dataset",
    "write_records",
    *_LAZY,
]
