"""Stage 4: what a reader sees.

- `plots`: every figure, drawn from the result tables.
- `results_readme`: the labs' questions answered with one run's numbers.
- `compare`: a run against a reference run, with the tolerances of what should agree.
"""
