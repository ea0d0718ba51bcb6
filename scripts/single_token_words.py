"""The synthetic prompts' vocabulary, as data: ``replayer/single_token_words.txt``.

A synthetic prompt of N words must count N tokens, so each word is one token with
its leading space. The pre-tokenisation of cl100k_base and o200k_base splits
`` word`` from its neighbours (a space and letters are one piece), so a prompt of
such words is as many tokens as words, whatever their order. The words are the
ones both encodings keep whole (a target on either counts the prompt the same),
lower-case letters only (the text stays ASCII inside a JSON string), in the order
of their cl100k_base rank: the lower the rank, the earlier the merge, the more
common the word. A prompt drawn from V words takes the first V, so low-entropy
prompts read as common words. Slurs, profanity and sexual or violent words are
left out (``_LEFT_OUT``): a target behind a content filter would refuse or flag
random text that held them, and the replay would measure the filter.

    .venv/bin/python scripts/single_token_words.py            # rewrites the file
    .venv/bin/python scripts/single_token_words.py --check    # exit 1 if it differs
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tailreplay.traces.text.tokens import get

WORDS = 8192
"""2^13: 13 bits a token at most, and a 16-bit draw picks each word from 8 values."""
OUT = Path(__file__).resolve().parent.parent / "replayer" / "single_token_words.txt"
_WORD = re.compile(rb" [a-z]{2,12}")
_LEFT_OUT_WORDS = """
anal anus arse ass asses bastard bitch bitches blowjob bollocks boob boobs cock
cocks crap cum cunt damn dick dicks dildo fag faggot fuck fucked fucking fucks
genocide gore horny incest jerk kill killed killer killing kills masturb murder
murdered naked nazi nazis negro nigga nigger nude nudity orgasm penis piss porn
porno pussy rape raped rapist retard retarded sex sexual sexually sexy shit slut
suicide terror terrorism terrorist terrorists tits torture vagina whore
"""
_LEFT_OUT = frozenset(_LEFT_OUT_WORDS.split())


def words() -> list[str]:
    cl100k, o200k = get("cl100k_base"), get("o200k_base")
    found: list[str] = []
    for rank in range(cl100k.n_vocab):
        try:
            piece = cl100k.decode_single_token_bytes(rank)
        except KeyError:  # ranks left unassigned between the special tokens
            continue
        if not _WORD.fullmatch(piece) or piece[1:].decode() in _LEFT_OUT:
            continue
        if len(o200k.encode_ordinary(piece.decode())) == 1:
            found.append(piece[1:].decode())
            if len(found) == WORDS:
                return found
    raise SystemExit(f"only {len(found)} words of one token in both encodings")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    text = "\n".join(words()) + "\n"
    if parser.parse_args().check:
        same = OUT.read_text() == text
        print(f"{OUT.name}: {'up to date' if same else 'differs'}")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"{OUT}: {WORDS} words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
