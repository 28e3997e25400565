"""The Python packages the project's lent GPU machine lacks, hidden from a process that has this folder
on its ``PYTHONPATH`` (Python imports ``sitecustomize`` at start-up): ``import fastapi`` then fails
and ``importlib.util.find_spec("fastapi")`` is None, as there. ``tests/test_gpu_check.py`` runs the
GPU check's dry run so, to show that the check needs none of them.

The machine's packages are listed in the device tool's notes (KINDS.md); this project's own
dependencies and extras missing from that list are these.
"""

import sys

MISSING = ("ctranslate2", "fastapi", "uvicorn", "multipart", "python_multipart", "sentencex", "py3langid", "polib",
           "rapidfuzz")

for name in MISSING:
    sys.modules.setdefault(name, None)  # None in sys.modules: the import system reports the module missing
