"""The Alilama application: the ``alilama`` CLI and the work behind its commands.

It sits on the library (``alilama_core``): data preparation, evaluation reports,
the quickstart, the procedural story corpus, plots and model reports. The
library never imports this package.
"""
