"""What the measurement scripts under ``scripts/`` share, so that each is written once.

- ``paths``: the checkout's corpus, golden Vela output and configurations (no ``sys.path`` edits);
- ``golden``: the golden configurations, as run options, command-line arguments or a sweep's configuration;
- ``stats``: ratios and their geometric means; ``table``: Markdown and CSV, whole or a row at a time;
- ``cli``: a script's parser (its ``--help`` is its docstring) and the options every script spells the same;
- ``netgen_models``: generated networks written for a grid; ``vela_cli``: a Vela core's own totals of a file;
- ``process``: ``solve-schedule`` timed as a whole process, its JSON read back;
- ``versus``, ``versus_summary``: npusched's runs against Vela's cores (``scripts/bench/vs_vela.py``).

The top layer of pyproject.toml's import contract: it may use every other package, and none may use it.
"""
