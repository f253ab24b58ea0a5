"""The base layer: what every other layer stands on and no plugin author needs to read.

Errors (``errors``), safe file writing, folders swapped in whole and folder
locks (``files``), input limits (``limits``) and the check of a plugin's
options (``options``). It imports nothing from the rest of Alilama.
"""
