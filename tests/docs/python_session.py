"""One Python session of the docs runner: runs each block it is sent in the same globals, as a notebook does.

Reads one JSON line per block (``{"code": ...}``) and answers one JSON line
(``{"status": 0 or 1, "output": what the block printed, and its traceback}``).
"""

from __future__ import annotations

import io
import json
import sys
import traceback
from contextlib import redirect_stderr, redirect_stdout

answers = sys.stdout
namespace: dict[str, object] = {"__name__": "__main__"}
for line in sys.stdin:
    code = json.loads(line)["code"]
    output = io.StringIO()
    status = 0
    with redirect_stdout(output), redirect_stderr(output):
        try:
            exec(compile(code, "<doc block>", "exec"), namespace)
        except BaseException:  # noqa: BLE001: the block's failure is reported, not raised
            traceback.print_exc()
            status = 1
    answers.write(json.dumps({"status": status, "output": output.getvalue()}) + "\n")
    answers.flush()
