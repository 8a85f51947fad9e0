"""`npusched-sweep`: run a grid of models x hardware x options x solvers into a resumable SQLite store.

The flow, one module per step: ``grid`` expands the options into cells (each named by a hash of every input),
``engine`` skips the cells the ``store`` already holds and hands the rest to an executor (``local`` process pool or
``ray_executor``), which runs each with ``runner`` in a guarded process; the driver alone writes the rows.
``report`` and ``plots`` read the store back.
"""
