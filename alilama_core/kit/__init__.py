"""A conformance kit for plugins: one module per plugin kind, run from a plugin's own tests.

In the spirit of scikit-learn's ``check_estimator``: each ``check_*`` function
exercises what the toolkit will call on a plugin and raises ``AssertionError``
with a message naming the contract that failed. Each returns the names of the
checks it ran, so a test can show them::

    from alilama_core.kit import check_positional_scheme

    def test_my_scheme_conforms():
        check_positional_scheme("kerple-log")

Or one test case per check, in scikit-learn's ``parametrize_with_checks``
shape: each kind's ``*_checks`` function lists its small named checks; a check
that does not apply is a skipped case saying why, and a check the plugin is
known to fail is declared with ``known_gaps={"check name": "why"}`` and
becomes a strict expected failure::

    from alilama_core.kit import parametrize_with_checks, positional_checks, tokenizer_checks

    @parametrize_with_checks(positional_checks("kerple-log"), tokenizer_checks("hf-bpe", vocab_size=320))
    def test_conforms(check):
        check()

``check_positional_scheme`` and ``check_attention_backend`` build tiny models
on the CPU (a second or two); ``check_tokenizer`` trains on a few lines;
``check_trainer`` trains a tiny model for a few steps on a prepared data folder;
``check_logger`` runs a logger through a run, an interrupted and resumed one, and an evaluation;
``check_optimizer`` trains a tiny model with an optimizer, restores its state and resumes a run;
``check_exporter`` exports a tiny run through the core and reads it back.
The built-in plugins pass every check in Alilama's own test suite.
"""

from alilama_core.kit.attention import attention_checks, check_attention_backend
from alilama_core.kit.common import (
    TRICKY_TEXTS,
    Check,
    parametrize_with_checks,
    registered,
    run_checks,
    tiny_model_config,
)
from alilama_core.kit.exporter import check_exporter, exporter_checks
from alilama_core.kit.logger import check_logger, logger_checks
from alilama_core.kit.optimizer import check_optimizer, optimizer_checks
from alilama_core.kit.positional import check_positional_scheme, positional_checks
from alilama_core.kit.task import check_task, task_checks
from alilama_core.kit.tokenizer import check_tokenizer, tokenizer_checks
from alilama_core.kit.trainer import check_trainer, trainer_checks

__all__ = [
    "TRICKY_TEXTS",
    "Check",
    "attention_checks",
    "check_attention_backend",
    "check_exporter",
    "check_logger",
    "check_optimizer",
    "check_positional_scheme",
    "check_task",
    "check_tokenizer",
    "check_trainer",
    "exporter_checks",
    "logger_checks",
    "optimizer_checks",
    "parametrize_with_checks",
    "positional_checks",
    "registered",
    "run_checks",
    "task_checks",
    "tiny_model_config",
    "tokenizer_checks",
    "trainer_checks",
]
