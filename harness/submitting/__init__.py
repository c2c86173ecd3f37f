"""Writing and sending a submission: the static checks (lint.py), compiling it without a GPU
(compile.py, compile_capture.py), sending it to the competition (submit.py), and the command-line
options these commands share with the others (options.py)."""
