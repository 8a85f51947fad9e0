"""``python -m npusched.vela.taught_vela ARGS``: Vela's own command, its legacy core taught BATCH_MATMUL and GELU.

Vela legacy as npusched's backend bridge runs it (``npusched.vela.lessons``): everything else is Vela's own
scheduler and backend, so its partition and its schedule are the reference npusched's heuristic and placement are
held to on networks with attention products (on any other network it is plain Vela).
"""

from __future__ import annotations

import sys

from npusched.vela.lessons import vela_taught


def main(argv: list[str] | None = None) -> int:
    from ethosu.vela import vela

    with vela_taught():
        return int(vela.main(argv))


if __name__ == "__main__":
    sys.exit(main())
