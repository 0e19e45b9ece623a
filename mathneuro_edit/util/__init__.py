"""Helpers every stage shares: atomic and reproducible files, content hashes, claiming ``--out``, the console,
local-path rules, the user's regular expressions and scrubbing.

Contract: no knowledge of the method, recipes or runs; each helper has exactly one home here (files, hashing,
outdir, console, paths, patterns, scrub). Nothing is re-exported: import the module you need (``from
..util.files import write_text_atomic``), so that importing one cheap helper (the CLI's console) never loads torch.
"""
