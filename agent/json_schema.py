"""JSON Schema validators for the project's record formats (session logs, task sets), each
schema file read and compiled once per process.

    errors = list(schema_validator(SCHEMA_PATH).iter_errors(record))
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema


@functools.cache
def schema_validator(path: Path) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(Path(path).read_text()))
