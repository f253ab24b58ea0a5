"""``alilama chat RUN``: the engine's continuous batch, one row, in a terminal.

The history is kept and sent whole each turn under the run's chat template
(``alilama_core.engine.chat``), as ``/v1/chat/completions`` would render it;
the reply streams as it is decoded and ends at end-of-text, at
``--max-new-tokens``, or where the model starts the next turn itself
(``CHAT_STOPS``).
"""

from __future__ import annotations

from alilama_core.app.common import CheckpointOpt, RunArg, err_console, examples
from alilama_core.app.run_options import (
    DeviceOpt,
    FrequencyPenaltyOpt,
    LogitBiasOpt,
    MaxNewTokensOpt,
    PresencePenaltyOpt,
    SeedOpt,
    TemperatureOpt,
    DecodeOpt,
    ThreadsOpt,
    check_decode,
    TopKOpt,
    load_to_sample,
    logit_bias,
    setup_decode,
)


@examples("alilama chat runs/essay", "alilama chat runs/essay --temperature 0.7 --top-k 40")
def chat_cmd(
    run: RunArg,
    max_new_tokens: MaxNewTokensOpt = 100,
    temperature: TemperatureOpt = 0.8,
    top_k: TopKOpt = None,
    presence_penalty: PresencePenaltyOpt = 0.0,
    frequency_penalty: FrequencyPenaltyOpt = 0.0,
    logit_bias_pairs: LogitBiasOpt = None,
    seed: SeedOpt = None,
    checkpoint: CheckpointOpt = None,
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = None,
    decode: DecodeOpt = "auto",
) -> None:
    """Chat with a run in the terminal (streamed; /reset clears the history, /quit or Ctrl-D leaves)."""
    import sys

    from alilama_core.engine.chat import run_template
    from alilama_core.engine.generation import SamplingSettings

    settings = SamplingSettings(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty,
        logit_bias=logit_bias(logit_bias_pairs),
        seed=seed,
        decode=check_decode(decode),
    ).validate()
    loaded = load_to_sample(run, checkpoint, device, threads)
    setup_decode(loaded, decode)
    settings.validate(loaded.model.config.vocab_size)
    interactive = sys.stdin.isatty()
    if interactive:
        err_console.print("a base model continues text; it was not trained to chat. /reset, /quit", highlight=False)

    def read() -> str | None:
        if interactive:
            sys.stdout.write("you> ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        return None if line == "" else line

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    chat_turns(loaded, settings, run_template(loaded.path), read, write)


def chat_turns(loaded, settings, template: str, read, write) -> None:
    """A chat loop: ``read()`` gives each user line (``None``: the end), ``write(text)`` shows the reply as it streams.

    The history is kept and sent whole each turn (under the chat template); ``/reset`` clears it,
    ``/quit`` (or the end of input) leaves.
    """
    from alilama_core.engine.batching import ContinuousBatch, Event
    from alilama_core.engine.chat import CHAT_STOPS, chat_prompt
    from alilama_core.engine.scheduler import Choice

    capacity = loaded.model.positional.max_positions or 4096
    batch = ContinuousBatch(
        loaded.model, rows=1, capacity=capacity, eot_id=loaded.tokenizer.eot_id, decode=settings.decode
    )
    messages: list[dict] = []
    while (line := read()) is not None:
        line = line.strip()
        if line in ("/quit", "/exit"):
            return
        if line == "/reset":
            messages.clear()
            write("(history cleared)\n")
            continue
        if not line:
            continue
        messages.append({"role": "user", "content": line})
        ids = loaded.tokenizer.encode(chat_prompt(messages, template), allowed_special="all")
        room = batch.capacity - 1 - settings.max_new_tokens
        if len(ids) > room:  # the oldest turns go first when the history no longer fits
            ids = ids[-room:]
        choice = Choice(loaded.tokenizer, CHAT_STOPS)
        handle, event = batch.join(ids, settings)
        while True:
            write(choice.add(event))
            if choice.finish_reason is not None:
                batch.leave(handle)
                break
            events = batch.step()
            event = events[0] if events else Event(handle, None, "stop")
        write("\n")
        messages.append({"role": "assistant", "content": choice.text.strip()})
