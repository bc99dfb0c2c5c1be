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

__all__ = [
    "TASKS",
    "LoadReport",
    "MedADRecord",
    "RecordError",
    "load_records",
    "record_from_dict",
    "validate_dataset",
    "write_records",
]
